"""``fabricmon`` command line: run, demo, record, replay, check-config, eval, audit, job, correlate."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from importlib import resources
from pathlib import Path
from typing import IO, Any

from fabricmon.agent import __version__
from fabricmon.agent.config import DEFAULT_LISTEN, ConfigError, check_file, load, position_order
from fabricmon.agent.recording import Limits, RecordingError, iter_lines
from fabricmon.core.model import Finding

log = logging.getLogger("fabricmon")


def demo_recording() -> Path:
    return Path(str(resources.files("fabricmon.agent") / "demo" / "demo.jsonl.gz"))


def _setup_logging(level: str) -> None:
    from fabricmon.core.secrets import RedactFilter

    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # a secret or credential that escaped into a message prints as ***
        if not any(isinstance(f, RedactFilter) for f in handler.filters):
            handler.addFilter(RedactFilter())


def _load_config(path: str | None, exit_code: int = 1):
    """The loaded config (None without a path); its problems printed and SystemExit(exit_code)
    when it has any. Deprecation warnings go to the log."""
    if path is None:
        return None
    try:
        loaded = load(path)
    except ConfigError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        raise SystemExit(exit_code) from None
    for w in loaded.warnings:
        log.warning("%s", w)
    return loaded


# ---------------------------------------------------------------------- check-config
def cmd_check_config(args: argparse.Namespace) -> int:
    """Every problem of the file in one run, in the file's order: the file itself, then (unless
    --syntax-only) what the daemon needs at start for every part that is valid on its own: the
    web config, the state directory, every secret and file, the commands sources run (warnings)."""
    try:
        checked = check_file(args.file)
    except ConfigError as exc:  # unreadable, or not a YAML mapping: nothing else can be checked
        problems, warnings, checked = list(exc.problems), [], None
    else:
        problems, warnings = list(checked.problems), list(checked.warnings)
        if not args.syntax_only:
            from fabricmon.agent import preflight

            found = preflight.check(checked, credentials_dir=args.credentials_dir)
            problems += found.errors
            warnings += found.warnings
    for line in position_order([*problems, *warnings], args.file):
        print(line, file=sys.stderr)
    if problems or checked is None or checked.config is None:
        print(f"{args.file}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    n = len(checked.config.enabled_targets())
    what = "syntax OK" if args.syntax_only else "OK"
    print(f"{args.file}: {what} ({n} enabled target(s), {len(checked.config.links)} static link(s))")
    return 0


# ---------------------------------------------------------------------- run / record
def _web_security(args: argparse.Namespace, loaded):
    path = getattr(args, "web_config_file", None) or (loaded.config.web.config_file if loaded else None)
    if not path:
        return None, []
    from fabricmon.agent.exporter import webconfig

    try:
        return webconfig.load(path)
    except webconfig.WebConfigError as exc:
        print(f"web config: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def cmd_run(args: argparse.Namespace) -> int:
    if args.config is None:
        # Never fall back to the demo: a unit that lost its --config.file would serve made-up findings.
        print("fabricmon run needs --config.file FILE (see packaging/fabricmon.example.yml); "
              "for the built-in demo, run: fabricmon demo", file=sys.stderr)
        return 2
    loaded = _load_config(args.config)
    from fabricmon.agent import state
    from fabricmon.agent.runtime import Agent

    state_dir = state.default_state_dir(loaded.config.global_.state_dir)
    problem = state.prepare_dir(state_dir) if state_dir else None
    if problem is not None:
        print(f"{args.config}: {problem}", file=sys.stderr)
        return 1
    ssl_ctx, middlewares = _web_security(args, loaded)
    try:
        with _commands_reaped():
            asyncio.run(Agent(loaded, listen=args.listen, ssl_context=ssl_ctx, middlewares=middlewares,
                              enable_lifecycle=args.enable_lifecycle).run())
    except OSError as exc:  # e.g. the listen address is taken
        print(f"error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _commands_reaped():
    """This process owns every process its collectors' commands start: it is their subreaper
    (strict: any re-parented child is a leftover), and none of them survives it
    (fabricmon.collectors.reaper)."""
    from fabricmon.collectors import REAPER

    REAPER.enable(strict=True)
    try:
        yield
    finally:
        REAPER.sweep()


def cmd_record(args: argparse.Namespace) -> int:
    loaded = _load_config(args.config)
    from fabricmon.agent.runtime import Agent
    from fabricmon.core.durations import parse_duration

    try:
        duration = parse_duration(args.duration) if args.duration else None
    except ValueError as exc:
        print(f"error: --duration: {exc}", file=sys.stderr)
        return 2
    try:  # the file must be writable now: `record` is run by hand, where a typo is better said at once
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC, 0o600))
    except (OSError, ValueError) as exc:
        print(f"error: cannot record to {args.out}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    print(f"recording every poll to {args.out}" + (f" for {duration:g} s" if duration else " until interrupted"), file=sys.stderr)
    try:
        with _commands_reaped():
            # A recording only: the daemon's state file (state_dir, $STATE_DIRECTORY) is neither restored nor written.
            asyncio.run(Agent(loaded, listen=args.listen or "", record_path=args.out, duration=duration, keep_state=False).run())
    except OSError as exc:
        print(f"error: cannot record to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except RecordingError as exc:  # appending to a file that is not a recording
        print(f"error: cannot append: {exc}", file=sys.stderr)
        return 2
    return 0


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run_demo(args.listen, args.speed, demo_recording()))
    except OSError as exc:
        print(f"error: cannot serve on {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1


async def _run_demo(listen: str, speed: float, path: Path, loops: int | None = None) -> int:
    """Loop ``path`` with its poll times on the wall clock: each loop starts now and maps
    recording time onto real time (divided by ``speed``), so nothing drifts across loops."""
    from fabricmon.agent.exporter.server import Exporter, make_app, start_server
    from fabricmon.agent.replay import replay_paced, replay_pipeline

    if not path.exists():
        print(f"the demo recording is missing from this installation ({path})", file=sys.stderr)
        return 1
    header = next(iter_lines(path))[1]
    pipeline = replay_pipeline(header, path)
    exporter = Exporter(pipeline, demo=True)
    exporter.render_now()
    runner = await start_server(make_app(exporter), listen)
    host = listen.rsplit(":", 1)[0] or "localhost"
    port = listen.rsplit(":", 1)[1]
    url = f"http://{host}:{port}"
    print(f"""fabricmon {__version__} demo: replaying a bundled recording of a small mixed fabric
({header.get('description', '')}) at {speed:g}x, looping, on the wall clock.

  {url}/                the landing page: targets and active findings
  {url}/metrics         the Prometheus exposition (try: curl -s {url}/metrics | grep finding_active)
  {url}/api/findings    findings as JSON, with summary and evidence

Findings appear as the faults in the recording unfold (the first within about {90 / speed:g} s). Ctrl-C to stop.""",
          file=sys.stderr, flush=True)
    stopper = asyncio.create_task(_wait_for_signal())
    replay: asyncio.Task | None = None
    try:
        done_loops = 0
        while not stopper.done() and (loops is None or done_loops < loops):
            replay = asyncio.create_task(replay_paced(path, speed=speed, pipeline=pipeline, on_poll=exporter.request_render,
                                                      wall_clock=True))
            done, _ = await asyncio.wait({replay, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if replay not in done:
                break
            result = replay.result()
            done_loops += 1
            log.info("demo: recording finished (%d polls); starting again", result.polls)
            # One poll interval between loops, as between any two polls: the next loop's first
            # poll is then one interval after this loop's last, on both clocks.
            await asyncio.sleep(result.poll_interval / speed)
    finally:
        for task in (replay, stopper):
            if task is not None:
                task.cancel()
        await runner.cleanup()
    return 0


# ---------------------------------------------------------------------- replay
class _FindingsOut:
    """Where findings go as JSON lines; OSError when the path cannot be written."""

    def __init__(self, target: str | None) -> None:
        self.fh: IO[str] | None = None
        if target == "-":
            self.fh = sys.stdout
        elif target:
            self.fh = open(target, "w", encoding="utf-8")  # noqa: SIM115

    def write(self, f: Finding) -> None:
        if self.fh is not None:
            self.fh.write(json.dumps(f.to_json(), sort_keys=False) + "\n")
            self.fh.flush()

    def close(self) -> None:
        if self.fh is not None and self.fh is not sys.stdout:
            self.fh.close()


REPLAY_EXIT_CODES = """exit codes:
  0  replayed every line
  1  replayed, with data errors skipped (malformed or over-long lines, a torn last line, a
     truncated or corrupt gzip stream, polls of targets beyond --max-targets); the count
     and the first of them are printed
  2  could not replay (unreadable file, not a recording, unknown version, bad arguments,
     an unwritable --findings-out)
  3  replayed, but a detector rule failed (a bug: the rule and its error are printed); the
     findings of that rule may be missing"""


def _replay_config(args: argparse.Namespace) -> str | None:
    """``--config.file``, else the ``X.yml`` beside recording ``X.jsonl[.gz]`` when there is one
    (as ``fabricmon eval`` does): a recording holds what the devices sent, not the operator's
    ``fabric:`` layout or thresholds, so a recording shipped with its config replays as taken."""
    if args.config is not None:
        return args.config
    from fabricmon.agent.evaluate import config_beside

    beside = config_beside(Path(args.file))
    if not beside.is_file():
        return None
    if not args.quiet:
        print(f"using the config beside the recording: {beside}", file=sys.stderr)
    return str(beside)


def cmd_replay(args: argparse.Namespace) -> int:
    loaded = _load_config(_replay_config(args))
    limits = Limits(max_line_bytes=args.max_line_bytes, max_total_bytes=args.max_total_bytes, max_targets=args.max_targets)
    speed = None if args.fast else (args.speed if args.speed is not None else (1.0 if args.serve else None))
    try:
        out = _FindingsOut(args.findings_out)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        print(f"error: cannot write findings to {args.findings_out!r}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    try:
        if args.serve:
            return asyncio.run(_replay_serve(args, loaded, out, speed, limits))
        if speed:
            return asyncio.run(_replay_paced_cli(args, loaded, out, speed, limits))
        from fabricmon.agent.replay import replay_recording

        result = replay_recording(args.file, loaded, on_finding_end=out.write, progress=not args.quiet, limits=limits)
        for f in result.pipeline.detector.close_all():
            out.write(f)
        return _summary(result)
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing findings failed (disk full), or --serve cannot listen
        print(f"error: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""), file=sys.stderr)
        return 2
    finally:
        out.close()


async def _replay_paced_cli(args, loaded, out: _FindingsOut, speed: float, limits: Limits) -> int:
    from fabricmon.agent.replay import replay_paced

    result = await replay_paced(args.file, loaded, speed=speed, on_finding_end=out.write, progress=not args.quiet, limits=limits)
    for f in result.pipeline.detector.close_all():
        out.write(f)
    return _summary(result)


async def _replay_serve(args, loaded, out: _FindingsOut, speed: float | None, limits: Limits) -> int:
    from fabricmon.agent.exporter.server import Exporter, make_app, start_server
    from fabricmon.agent.replay import replay_paced, replay_pipeline

    header = next(iter_lines(args.file, limits=limits))[1]
    pipeline = replay_pipeline(header, args.file, loaded, out.write, limits, exposition=True)  # the config's levels, as served live
    exporter = Exporter(pipeline)
    exporter.render_now()
    ssl_ctx, middlewares = _web_security(args, loaded)
    runner = await start_server(make_app(exporter, middlewares), args.serve, ssl_ctx)
    print(f"serving on {'https' if ssl_ctx else 'http'}://{args.serve}/metrics", file=sys.stderr, flush=True)
    try:
        result = await replay_paced(args.file, loaded, speed=speed, pipeline=pipeline, on_poll=exporter.request_render,
                                    progress=not args.quiet, limits=limits)
        exporter.render_now()
        for f in pipeline.detector.close_all():
            out.write(f)
        code = _summary(result)
        print(f"replay finished; still serving on {args.serve} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        await _wait_for_signal()
    finally:
        await runner.cleanup()
    return code


def _summary(result) -> int:
    """Print what was replayed and skipped, and any rule that failed; the exit code (0 all
    replayed, 1 data errors skipped, 3 a rule failed)."""
    by_kind: dict[str, int] = {}
    for f in result.findings:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())) or "none"
    print(f"replayed {result.polls} polls of {len(result.pipeline.targets)} target(s); findings: {kinds}", file=sys.stderr, flush=True)
    if result.skipped:
        print(f"{result.skipped} data error(s) skipped; the first: {result.skipped_examples[0]}", file=sys.stderr, flush=True)
    failed = result.pipeline.detector.status().problems()
    for line in failed:
        print(f"error: detector {line} (a bug: its findings may be missing)", file=sys.stderr, flush=True)
    return 3 if failed else 1 if result.skipped else 0


# ---------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace) -> int:
    try:
        from fabricmon.agent.evaluate import run_eval
    except ImportError as exc:
        print(f"eval is not available in this installation: {exc}", file=sys.stderr)
        return 2
    pipeline_log = logging.getLogger("fabricmon.agent.pipeline")
    level = pipeline_log.level
    if args.log_level != "debug":  # the corpus replays outages on purpose: keep the report readable
        pipeline_log.setLevel(logging.ERROR)
    try:
        loaded = _load_config(args.config)
        floors = {"precision": args.min_precision, "recall": args.min_recall, "origin_top1": args.min_origin_top1}
        report, ok = run_eval(args.paths, floors=floors, config=loaded, as_json=args.json)
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # a path that cannot be listed (ValueError: a NUL byte in it)
        print(f"error: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    finally:  # main() can run in-process (tests, embedding): leave the logger as it was
        pipeline_log.setLevel(level)
    print(report)
    return 0 if ok else 1


# ---------------------------------------------------------------------- audit
AUDIT_EXIT_CODES = """exit codes:
  0  no check failed (every check passed, or could not be verified: unknown)
  1  at least one check failed
  2  could not audit (unreadable or invalid recording or config, no input given), or no target
     delivered data (every target down: nothing could be verified)"""


def cmd_audit(args: argparse.Namespace) -> int:
    """The lossless-fabric checklist of one poll (``--config.file``) or of a recording."""
    from fabricmon.agent import audit

    if args.recording is None and args.config is None:
        print("fabricmon audit needs a recording to read or --config.file FILE to poll the configured targets once",
              file=sys.stderr)
        return 2
    loaded = _load_config(args.config, exit_code=2)
    pipeline_log = logging.getLogger("fabricmon.agent.pipeline")
    level = pipeline_log.level
    if args.log_level != "debug":  # failed targets are listed in the audit's notes
        pipeline_log.setLevel(logging.ERROR)
    try:
        if args.recording:
            result = audit.audit_recording(args.recording, loaded)
        else:
            with _commands_reaped():
                result = asyncio.run(audit.audit_live(loaded))
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # an unreadable path (ValueError: a NUL byte in it)
        print(f"error: {getattr(exc, 'strerror', None) or exc}" + (f": {exc.filename}" if getattr(exc, "filename", None) else ""),
              file=sys.stderr)
        return 2
    finally:
        pipeline_log.setLevel(level)
    if args.json:
        print(json.dumps(result.to_json(), indent=1, sort_keys=False))
    else:
        print(audit.format_text(result), end="")
    if not result.read:
        print("error: no target delivered data (every target failed): nothing could be verified", file=sys.stderr)
        return 2
    return 1 if result.failed else 0


# ---------------------------------------------------------------------- job
JOB_EXIT_CODES = """exit codes:
  0  no fabric finding touches the job in the window
  1  a finding touches it (the verdict names it)
  2  cannot tell: no job source knows the job, or the agent or recording cannot be read"""


def _ca_context(ca_file: str | None) -> Any:
    """The TLS context for ``--ca-file`` (a regular PEM file, opened without blocking), else the system's."""
    import ssl

    from fabricmon.core.files import MAX_PEM_BYTES, checked_path

    if not ca_file:
        return ssl.create_default_context()
    with checked_path(ca_file, MAX_PEM_BYTES, "--ca-file") as path:
        return ssl.create_default_context(cafile=path)


def _job_from_agent(args: argparse.Namespace, window: float | None) -> tuple[dict | None, str]:
    """The view from a running agent's /api/jobs/<id>: (view or None, error)."""
    import base64
    import ssl
    import urllib.error
    import urllib.request
    from urllib.parse import quote

    from fabricmon.core.files import FileRefused, read_regular
    from fabricmon.core.secrets import MAX_SECRET_FILE_BYTES

    url = f"{args.url.rstrip('/')}/api/jobs/{quote(args.id, safe='')}" + (f"?window={window:.0f}" if window else "")
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    if args.user:
        try:  # a regular file, opened without blocking (a FIFO is refused, never waited on)
            password = read_regular(args.password_file, MAX_SECRET_FILE_BYTES, "--password-file").decode("utf-8").strip()
        except (FileRefused, TypeError, UnicodeDecodeError) as exc:
            return None, f"cannot read --password-file: {exc}"
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{args.user}:{password}".encode()).decode())
    try:
        ctx = _ca_context(args.ca_file) if url.startswith("https") else None
    except (FileRefused, OSError, ssl.SSLError) as exc:
        return None, f"cannot load --ca-file: {exc}"
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
            return json.loads(r.read()), ""
    except urllib.error.HTTPError as exc:
        return None, f"{url}: HTTP {exc.code}: {exc.read(300).decode('utf-8', 'replace').strip()}"
    except (OSError, ValueError) as exc:
        return None, f"{url}: {getattr(exc, 'reason', None) or exc}"


def cmd_job(args: argparse.Namespace) -> int:
    """Where a job runs in the fabric and which findings touch it: from a recording, or a running agent."""
    from fabricmon.agent.jobs.view import format_text, job_view
    from fabricmon.core.durations import parse_duration

    try:
        window = parse_duration(args.window) if args.window else None
    except ValueError as exc:
        print(f"error: --window: {exc}", file=sys.stderr)
        return 2
    if args.recording:
        from fabricmon.agent.replay import replay_recording

        loaded = _load_config(args.config or _replay_config(argparse.Namespace(config=None, file=args.recording, quiet=True)))
        quiet = {"fabricmon": logging.WARNING, "fabricmon.agent.pipeline": logging.ERROR} if args.log_level == "info" else {}
        before = {name: logging.getLogger(name).level for name in quiet}
        for name, level in quiet.items():  # the replay's own chatter (profiles chosen, target errors) is not the answer
            logging.getLogger(name).setLevel(level)
        try:
            result = replay_recording(args.recording, loaded)
        except (RecordingError, OSError) as exc:
            print(f"error: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            return 2
        finally:  # main() can run in-process (tests, embedding): leave the loggers as they were
            for name, level in before.items():
                logging.getLogger(name).setLevel(level)
        view = job_view(result.pipeline, args.id, window)
        error = f"no job source in {args.recording} reports job {args.id!r}"
    else:
        view, error = _job_from_agent(args, window)
    if view is None:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(view, indent=1) if args.json else format_text(view), end="\n" if args.json else "")
    return 1 if view["findings"] else 0


# ---------------------------------------------------------------------- correlate
def cmd_correlate(args: argparse.Namespace) -> int:
    from fabricmon.agent.correlate import Correlator

    c = Correlator(args.prometheus, window=args.window, interval=args.interval)
    if args.once:
        findings = asyncio.run(c.run_once())
        if not c.up:
            print(f"error: {c.last_error}", file=sys.stderr)
            return 2
        for f in findings:
            print(json.dumps(f.to_json(), sort_keys=True))
        print(f"{len(findings)} cross-shard finding(s)", file=sys.stderr)
        return 0
    return asyncio.run(_correlate_serve(c, args.listen))


async def _correlate_serve(c, listen: str) -> int:
    from fabricmon.agent.correlate import make_app
    from fabricmon.agent.exporter.server import start_server

    runner = await start_server(make_app(c), listen)
    print(f"correlating {c.url} every {c.interval:g} s; serving on http://{listen}/metrics", file=sys.stderr, flush=True)
    task = asyncio.create_task(c.loop())
    try:
        await _wait_for_signal()
    finally:
        task.cancel()
        await runner.cleanup()
    return 0


# ---------------------------------------------------------------------- parser
def _speed(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < v <= 1e6:  # math.inf and nan fail this too
        raise argparse.ArgumentTypeError("must be above 0 and at most 1e6")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return v


LOG_LEVELS = ["debug", "info", "warning", "error"]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fabricmon", description="Live telemetry agent for InfiniBand and RoCEv2 GPU-cluster fabrics.")
    ap.add_argument("--version", action="version", version=f"fabricmon {__version__}")
    ap.add_argument("--log.level", dest="log_level", default="info", choices=LOG_LEVELS)
    sub = ap.add_subparsers(dest="command", required=True)
    for add in (_agent_commands, _replay_command, _check_commands, _job_command, _correlate_command):
        add(sub)
    for command in sub.choices.values():  # also after the command: `fabricmon run --log.level debug ...`
        command.add_argument("--log.level", dest="log_level", default=argparse.SUPPRESS, choices=LOG_LEVELS,
                             help="log level (default info); also accepted before the command")
    return ap


def _agent_commands(sub: Any) -> None:
    """Run, demo and record: the agent polling or replaying the demo."""
    run = sub.add_parser("run", help="run the agent on the configured targets")
    run.add_argument("--config.file", dest="config", help="configuration file (YAML); required")
    run.add_argument("--web.listen-address", dest="listen", help=f"address to serve on (default {DEFAULT_LISTEN})")
    run.add_argument("--web.config.file", dest="web_config_file", help="exporter-toolkit web config: TLS and basic auth")
    run.add_argument("--web.enable-lifecycle", dest="enable_lifecycle", action="store_true",
                     help="allow POST /-/reload (with X-Requested-With or a JSON Content-Type); off by default, as in Prometheus")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="serve the built-in demo: a bundled recording of a made-up fabric, looping")
    demo.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help=f"address to serve on (default {DEFAULT_LISTEN})")
    demo.add_argument("--speed", type=_speed, default=1.0,
                      help="replay speed (default 1: real time). Poll times stay on the wall clock, so above 1 "
                           "per-second rates read that many times their recorded values")
    demo.set_defaults(func=cmd_demo)

    rec = sub.add_parser("record", help="poll the configured targets and append every poll to a recording")
    rec.add_argument("--config.file", dest="config", required=True)
    rec.add_argument("--out", required=True, help="recording file (.jsonl, or .jsonl.gz for gzip); appended to")
    rec.add_argument("--duration", help="stop after this long (e.g. 10m); default: until interrupted")
    rec.add_argument("--web.listen-address", dest="listen", default="", help="also serve /metrics while recording")
    rec.set_defaults(func=cmd_record)


def _replay_command(sub: Any) -> None:
    """Replay: a recording through the agent's path."""
    rep = sub.add_parser("replay", help="replay a recording through the same parse/store/detect/export path",
                         epilog=REPLAY_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    rep.add_argument("file")
    pace = rep.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=_speed, help="replay N times faster than recorded (default 1 with --serve)")
    pace.add_argument("--fast", action="store_true", help="no sleeping: as fast as possible (default without --serve)")
    rep.add_argument("--serve", metavar="ADDR", help="serve /metrics etc. on ADDR during and after the replay")
    rep.add_argument("--findings-out", metavar="PATH", help="write findings as JSON lines to PATH ('-' for stdout)")
    rep.add_argument("--config.file", dest="config",
                     help="config for rule thresholds, the fabric: section and static links (default: X.yml beside recording "
                          "X.jsonl[.gz] when it exists)")
    rep.add_argument("--web.config.file", dest="web_config_file", help="exporter-toolkit web config for --serve")
    rep.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    d = Limits()
    rep.add_argument("--max-line-bytes", type=_positive_int, default=d.max_line_bytes,
                     help=f"skip lines longer than this (default {d.max_line_bytes >> 20} MiB)")
    rep.add_argument("--max-total-bytes", type=_positive_int, default=d.max_total_bytes,
                     help=f"stop after this many decompressed bytes (default {d.max_total_bytes >> 30} GiB)")
    rep.add_argument("--max-targets", type=_positive_int, default=d.max_targets,
                     help=f"refuse polls of targets beyond this many (default {d.max_targets})")
    rep.set_defaults(func=cmd_replay)


def _check_commands(sub: Any) -> None:
    """Check-config, eval and audit: checks of a config, the detector and a fabric."""
    chk = sub.add_parser("check-config", help="validate a configuration file and what it needs at start; exits 1 on problems")
    chk.add_argument("file")
    chk.add_argument("--syntax-only", action="store_true",
                     help="check the file only: not the web config, state directory, secrets, files or commands "
                          "(for builds without the secrets)")
    chk.add_argument("--credentials-dir", metavar="DIR",
                     help="read /run/credentials/<unit>/<name> paths as DIR/<name>: check, outside the unit, a config "
                          "whose secrets the unit gets with LoadCredential=<name>:DIR/<name>")
    chk.set_defaults(func=cmd_check_config)

    ev = sub.add_parser("eval", help="score the detector on recordings with truth lines")
    ev.add_argument("paths", nargs="+", help="recordings or folders of recordings")
    ev.add_argument("--config.file", dest="config")
    ev.add_argument("--min-precision", type=float, default=0.95)
    ev.add_argument("--min-recall", type=float, default=0.95)
    ev.add_argument("--min-origin-top1", type=float, default=0.90)
    ev.add_argument("--json", action="store_true", help="print the report as one JSON object (for tools) instead of text")
    ev.set_defaults(func=cmd_eval)

    au = sub.add_parser("audit", help="check the lossless-fabric (RoCEv2) configuration on every port and link; exits 1 on failures",
                        epilog=AUDIT_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    au.add_argument("recording", nargs="?", help="a recording to audit (its end state); without it, poll the configured targets once")
    au.add_argument("--config.file", dest="config", help="configuration: the targets to poll, the fabric: section, static links")
    au.add_argument("--json", action="store_true", help="the checklist as JSON, for machines")
    au.set_defaults(func=cmd_audit)


def _job_command(sub: Any) -> None:
    """Job: which findings touch a training job."""
    jb = sub.add_parser("job", help="which fabric findings touch a job, where its hosts sit, how its ports fare",
                        epilog=JOB_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    jb.add_argument("id", help="the job id as its scheduler names it (48213, 48213_7, namespace/name)")
    jb.add_argument("--json", action="store_true", help="the view as JSON (the body of /api/jobs/<id>)")
    jb.add_argument("--url", default=f"http://{DEFAULT_LISTEN}", help=f"a running agent (default http://{DEFAULT_LISTEN})")
    jb.add_argument("--user", help="basic-auth user of the agent's web config")
    jb.add_argument("--password-file", help="file holding that user's password")
    jb.add_argument("--ca-file", help="CA file for an https --url")
    jb.add_argument("--recording", metavar="REC", help="replay REC and answer from its end state instead of asking an agent")
    jb.add_argument("--config.file", dest="config", help="with --recording: the config (default: X.yml beside REC)")
    jb.add_argument("--window", help="how far back findings count (default: jobs.window, 6h)")
    jb.set_defaults(func=cmd_job)


def _correlate_command(sub: Any) -> None:
    """Correlate: findings across sharded agents."""
    co = sub.add_parser("correlate", help="join sharded agents through Prometheus: PFC storms and deadlocks that span shards")
    co.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus (or Thanos Query, VictoriaMetrics) base URL")
    co.add_argument("--window", default="1m", help="a port counts when its agent saw it paused over this whole window (default 1m)")
    co.add_argument("--once", action="store_true", help="correlate once, print findings as JSON lines, exit")
    co.add_argument("--interval", type=float, default=30.0, help="seconds between correlations when serving (default 30)")
    co.add_argument("--web.listen-address", dest="listen", default="127.0.0.1:10118", help="serve /metrics and /api/findings here")
    co.set_defaults(func=cmd_correlate)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
