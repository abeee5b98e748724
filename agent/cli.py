"""``fabricmon`` command line: run, demo, record, replay, check-config, eval, correlate."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from importlib import resources
from pathlib import Path
from typing import IO

from fabricmon.agent import __version__
from fabricmon.agent.config import DEFAULT_LISTEN, ConfigError, load
from fabricmon.agent.recording import RecordingError, iter_lines
from fabricmon.core.model import Finding

log = logging.getLogger("fabricmon")


def demo_recording() -> Path:
    return Path(str(resources.files("fabricmon.agent") / "demo" / "demo.jsonl.gz"))


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _load_config(path: str | None):
    if path is None:
        return None
    try:
        return load(path)
    except ConfigError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        raise SystemExit(1) from None


# ---------------------------------------------------------------------- check-config
def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        loaded = load(args.file)
    except ConfigError as exc:
        for p in exc.problems:
            print(p, file=sys.stderr)
        print(f"{args.file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return 1
    n = len(loaded.config.enabled_targets())
    print(f"{args.file}: OK ({n} enabled target(s), {len(loaded.config.links)} static link(s))")
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
    from fabricmon.agent.runtime import Agent

    ssl_ctx, middlewares = _web_security(args, loaded)
    asyncio.run(Agent(loaded, listen=args.listen, ssl_context=ssl_ctx, middlewares=middlewares).run())
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    loaded = _load_config(args.config)
    from fabricmon.agent.config import parse_duration
    from fabricmon.agent.runtime import Agent

    duration = parse_duration(args.duration) if args.duration else None
    print(f"recording every poll to {args.out}" + (f" for {duration:g} s" if duration else " until interrupted"), file=sys.stderr)
    asyncio.run(Agent(loaded, listen=args.listen or "", record_path=args.out, duration=duration).run())
    return 0


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _first_poll_time(path: Path) -> float:
    for _, line in iter_lines(path):
        if line.get("type") == "poll":
            return float(line["t"])
    raise RecordingError(f"{path}: no poll lines")


def cmd_demo(args: argparse.Namespace) -> int:
    return asyncio.run(_run_demo(args.listen, args.speed))


async def _run_demo(listen: str, speed: float) -> int:
    from fabricmon.agent.exporter.server import Exporter, make_app, start_server
    from fabricmon.agent.replay import build_pipeline, replay_paced

    path = demo_recording()
    if not path.exists():
        print(f"the demo recording is missing from this installation ({path})", file=sys.stderr)
        return 1
    header = next(iter_lines(path))[1]
    pipeline = build_pipeline(header, path)
    exporter = Exporter(pipeline, demo=True)
    exporter.render_now()
    runner = await start_server(make_app(exporter), listen)
    host = listen.rsplit(":", 1)[0] or "localhost"
    port = listen.rsplit(":", 1)[1]
    url = f"http://{host}:{port}"
    print(f"""fabricmon {__version__} demo: replaying a bundled recording of a small mixed fabric
({header.get('description', '')}) at {speed:g}x, looping.

  {url}/                the landing page: targets and active findings
  {url}/metrics         the Prometheus exposition (try: curl -s {url}/metrics | grep finding_active)
  {url}/api/findings    findings as JSON, with summary and evidence

Findings appear as the faults in the recording unfold (within about a minute). Ctrl-C to stop.""", file=sys.stderr, flush=True)
    offset = time.time() - _first_poll_time(path)
    stopper = asyncio.create_task(_wait_for_signal())
    try:
        while not stopper.done():
            replay = asyncio.create_task(replay_paced(path, lambda h: pipeline, speed=speed, on_poll=exporter.request_render,
                                                      time_offset=offset, pipeline=pipeline))
            done, _ = await asyncio.wait({replay, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if replay not in done:
                replay.cancel()
                break
            result = replay.result()
            span = max(pipeline.clock - (offset + _first_poll_time(path)), 0.0)
            offset += span + result.poll_interval
            log.info("demo: recording finished (%d polls); starting again", result.polls)
    finally:
        await runner.cleanup()
    return 0


# ---------------------------------------------------------------------- replay
class _FindingsOut:
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


def cmd_replay(args: argparse.Namespace) -> int:
    loaded = _load_config(args.config)
    out = _FindingsOut(args.findings_out)
    speed = None if args.fast else (args.speed if args.speed is not None else (1.0 if args.serve else None))
    try:
        if args.serve:
            return asyncio.run(_replay_serve(args, loaded, out, speed))
        if speed:
            return asyncio.run(_replay_paced_cli(args, loaded, out, speed))
        from fabricmon.agent.replay import replay_recording

        result = replay_recording(args.file, loaded, on_finding_end=out.write, progress=not args.quiet)
        for f in result.pipeline.detector.close_all():
            out.write(f)
        _summary(result)
        return 0
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        out.close()


async def _replay_paced_cli(args, loaded, out: _FindingsOut, speed: float) -> int:
    from fabricmon.agent.replay import build_pipeline, in_shard, replay_paced

    result = await replay_paced(args.file, lambda h: build_pipeline(h, args.file, loaded, out.write), speed=speed,
                                progress=not args.quiet, keep=in_shard(loaded))
    for f in result.pipeline.detector.close_all():
        out.write(f)
    _summary(result)
    return 0


async def _replay_serve(args, loaded, out: _FindingsOut, speed: float | None) -> int:
    from fabricmon.agent.exporter.server import Exporter, make_app, start_server
    from fabricmon.agent.replay import build_pipeline, in_shard, replay_paced

    header = next(iter_lines(args.file))[1]
    pipeline = build_pipeline(header, args.file, loaded, out.write)
    exporter = Exporter(pipeline)
    exporter.render_now()
    ssl_ctx, middlewares = _web_security(args, loaded)
    runner = await start_server(make_app(exporter, middlewares), args.serve, ssl_ctx)
    print(f"serving on {'https' if ssl_ctx else 'http'}://{args.serve}/metrics", file=sys.stderr, flush=True)
    try:
        result = await replay_paced(args.file, lambda h: pipeline, speed=speed, on_poll=exporter.request_render,
                                    progress=not args.quiet, pipeline=pipeline, keep=in_shard(loaded))
        exporter.render_now()
        for f in pipeline.detector.close_all():
            out.write(f)
        _summary(result)
        print(f"replay finished; still serving on {args.serve} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        await _wait_for_signal()
    finally:
        await runner.cleanup()
    return 0


def _summary(result) -> None:
    by_kind: dict[str, int] = {}
    for f in result.findings:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())) or "none"
    print(f"replayed {result.polls} polls of {len(result.pipeline.targets)} target(s); findings: {kinds}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace) -> int:
    try:
        from fabricmon.agent.evaluate import run_eval
    except ImportError as exc:
        print(f"eval is not available in this installation: {exc}", file=sys.stderr)
        return 2
    if args.log_level != "debug":  # the corpus replays outages on purpose: keep the report readable
        logging.getLogger("fabricmon.agent.pipeline").setLevel(logging.ERROR)
    loaded = _load_config(args.config)
    floors = {"precision": args.min_precision, "recall": args.min_recall, "origin_top1": args.min_origin_top1}
    try:
        report, ok = run_eval(args.paths, floors=floors, config=loaded)
    except RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report)
    return 0 if ok else 1


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
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fabricmon", description="Live telemetry agent for InfiniBand and RoCEv2 GPU-cluster fabrics.")
    ap.add_argument("--version", action="version", version=f"fabricmon {__version__}")
    ap.add_argument("--log.level", dest="log_level", default="info", choices=["debug", "info", "warning", "error"])
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the agent on the configured targets")
    run.add_argument("--config.file", dest="config", help="configuration file (YAML); required")
    run.add_argument("--web.listen-address", dest="listen", help=f"address to serve on (default {DEFAULT_LISTEN})")
    run.add_argument("--web.config.file", dest="web_config_file", help="exporter-toolkit web config: TLS and basic auth")
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo", help="serve the built-in demo: a bundled recording of a made-up fabric, looping")
    demo.add_argument("--web.listen-address", dest="listen", default=DEFAULT_LISTEN, help=f"address to serve on (default {DEFAULT_LISTEN})")
    demo.add_argument("--speed", type=float, default=4.0, help="replay speed (default 4x)")
    demo.set_defaults(func=cmd_demo)

    rec = sub.add_parser("record", help="poll the configured targets and append every poll to a recording")
    rec.add_argument("--config.file", dest="config", required=True)
    rec.add_argument("--out", required=True, help="recording file (.jsonl, or .jsonl.gz for gzip); appended to")
    rec.add_argument("--duration", help="stop after this long (e.g. 10m); default: until interrupted")
    rec.add_argument("--web.listen-address", dest="listen", default="", help="also serve /metrics while recording")
    rec.set_defaults(func=cmd_record)

    rep = sub.add_parser("replay", help="replay a recording through the same parse/store/detect/export path")
    rep.add_argument("file")
    pace = rep.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, help="replay N times faster than recorded (default 1 with --serve)")
    pace.add_argument("--fast", action="store_true", help="no sleeping: as fast as possible (default without --serve)")
    rep.add_argument("--serve", metavar="ADDR", help="serve /metrics etc. on ADDR during and after the replay")
    rep.add_argument("--findings-out", metavar="PATH", help="write findings as JSON lines to PATH ('-' for stdout)")
    rep.add_argument("--config.file", dest="config", help="config for rule thresholds and static links")
    rep.add_argument("--web.config.file", dest="web_config_file", help="exporter-toolkit web config for --serve")
    rep.add_argument("--quiet", action="store_true", help="no progress display on stderr")
    rep.set_defaults(func=cmd_replay)

    chk = sub.add_parser("check-config", help="validate a configuration file; exits non-zero on problems")
    chk.add_argument("file")
    chk.set_defaults(func=cmd_check_config)

    ev = sub.add_parser("eval", help="score the detector on recordings with truth lines")
    ev.add_argument("paths", nargs="+", help="recordings or folders of recordings")
    ev.add_argument("--config.file", dest="config")
    ev.add_argument("--min-precision", type=float, default=0.95)
    ev.add_argument("--min-recall", type=float, default=0.95)
    ev.add_argument("--min-origin-top1", type=float, default=0.90)
    ev.set_defaults(func=cmd_eval)

    co = sub.add_parser("correlate", help="join sharded agents through Prometheus: PFC storms and deadlocks that span shards")
    co.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus (or Thanos Query, VictoriaMetrics) base URL")
    co.add_argument("--window", default="1m", help="a port counts when its agent saw it paused over this whole window (default 1m)")
    co.add_argument("--once", action="store_true", help="correlate once, print findings as JSON lines, exit")
    co.add_argument("--interval", type=float, default=30.0, help="seconds between correlations when serving (default 30)")
    co.add_argument("--web.listen-address", dest="listen", default="127.0.0.1:10118", help="serve /metrics and /api/findings here")
    co.set_defaults(func=cmd_correlate)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(args.log_level)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
