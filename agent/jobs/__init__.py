"""Which training jobs a fabric fault touches, and whether the fabric touches a job (issue 30).

A stage of its own after the detector, fed by the job sources' inventories (``slurm``,
``slurmrestd``, ``kubernetes``, ``jobs-file``: ``ParseResult.inventory``), the findings the
detector produced, and the store and topology through their read APIs:

- :mod:`~fabricmon.agent.jobs.inventory`: the running jobs per job target, merged by id;
- :mod:`~fabricmon.agent.jobs.placement`: host -> NIC ports -> switch ports;
- :mod:`~fabricmon.agent.jobs.impact`: finding -> the ports it reaches (a rule per kind and
  role, stated in the evidence) -> hosts -> jobs;
- :mod:`~fabricmon.agent.jobs.stage`: the pipeline's hooks;
- :mod:`~fabricmon.agent.jobs.view`, :mod:`~fabricmon.agent.jobs.page`,
  :mod:`~fabricmon.agent.jobs.export`: ``fabricmon job``, ``/jobs/<id>``, the metrics.
"""
