import sys

from fabricmon.agent.cli import main

sys.exit(main())
