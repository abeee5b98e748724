"""exporter-toolkit web config: validation, and TLS / mutual TLS / basic auth against the real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from fabricmon.agent.exporter import webconfig
from fabricmon.agent.exporter.server import Exporter, make_app, start_server
from fabricmon.agent.exporter.webconfig import WebConfigError
from fabricmon.agent.pipeline import Pipeline
from tests.conftest import free_port
from tests.pki import Pki, make_pki

PASSWORD = "s3cret-pw"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests, same code path


# ---------------------------------------------------------------------- a small PKI (tests/pki.py)
@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------------- helpers
def _write(tmp_path: Path, text: str, name: str = "web.yml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@contextlib.asynccontextmanager
async def serving(path: str):
    ctx, middlewares = webconfig.load(path)
    exporter = Exporter(Pipeline([], []))
    exporter.render_now()
    port = free_port()
    runner = await start_server(make_app(exporter, middlewares), f"127.0.0.1:{port}", ctx)
    try:
        yield port, middlewares[0]
    finally:
        await runner.cleanup()


def client_ctx(pki: Pki, cert: str | None = None, max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    if cert:
        ctx.load_cert_chain(str(pki[f"{cert}.crt"]), str(pki[f"{cert}.key"]))
    if max_version:
        ctx.maximum_version = max_version
    return ctx


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def get(url: str, ctx: ssl.SSLContext | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict, str]:
    async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx if ctx is not None else False, headers=headers) as r:
        return r.status, dict(r.headers), await r.text()


def _tls_config(pki: Pki, extra: str = "", cert: str = "server") -> str:
    return f"""tls_server_config:
  cert_file: {pki[cert + '.crt']}
  key_file: {pki[cert + '.key']}
{extra}"""


# ---------------------------------------------------------------------- validation
def test_errors_name_file_line_and_key(tmp_path):
    path = _write(tmp_path, "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_versoin: TLS12\n")
    with pytest.raises(WebConfigError) as e:
        webconfig.load(path)
    assert str(e.value).startswith(f"{path}:4:") and "tls_server_config.min_versoin: unknown key" in str(e.value)


def test_bad_hash_is_named_but_not_echoed(tmp_path):
    path = _write(tmp_path, "basic_auth_users:\n  prometheus: hunter2-plaintext\n")
    with pytest.raises(WebConfigError) as e:
        webconfig.load(path)
    assert "basic_auth_users" in str(e.value) and "'prometheus'" in str(e.value)
    assert "hunter2" not in str(e.value)


@pytest.mark.parametrize(("tls", "message"), [
    ("  key_file: k\n", "cert_file is required"),
    ("  cert_file: c\n  key_file: k\n  client_auth_type: RequireAnyClientCert\n", "not supported"),
    ("  cert_file: c\n  key_file: k\n  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    ("  cert_file: c\n  key_file: k\n  client_ca_file: ca\n", "client_auth_type is NoClientCert"),
    ("  cert_file: c\n  key_file: k\n  min_version: TLS13\n  max_version: TLS12\n", "above max_version"),
    ("  cert_file: c\n  key_file: k\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "not supported"),
])
def test_tls_validation(tmp_path, tls, message):
    with pytest.raises(WebConfigError, match=message):
        webconfig.load(_write(tmp_path, "tls_server_config:\n" + tls))


def test_missing_cert_file_names_it_relative_to_the_config(tmp_path):
    path = _write(tmp_path, "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n")
    with pytest.raises(WebConfigError) as e:
        webconfig.load(path)
    assert str(tmp_path / "nope.crt") in str(e.value) and "cert_file" in str(e.value)


def test_reserved_header_rejected(tmp_path):
    with pytest.raises(WebConfigError, match="Authorization cannot be configured"):
        webconfig.load(_write(tmp_path, "http_server_config:\n  headers:\n    Authorization: x\n"))


# ---------------------------------------------------------------------- TLS + basic auth
async def test_tls_basic_auth(tmp_path, pki, monkeypatch):
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(webconfig.bcrypt, "checkpw", lambda pw, h: calls.append(1) or real(pw, h))
    path = _write(tmp_path, _tls_config(pki) + f"""basic_auth_users:
  prometheus: {HASH}
http_server_config:
  headers:
    X-Frame-Options: deny
""")
    async with serving(path) as (port, _):
        url = f"https://127.0.0.1:{port}"
        ctx = client_ctx(pki)
        status, headers, body = await get(f"{url}/metrics", ctx, basic("prometheus", PASSWORD))
        assert status == 200 and "fabricmon_build_info" in body
        assert headers["X-Frame-Options"] == "deny"
        for _ in range(3):
            assert (await get(f"{url}/metrics", ctx, basic("prometheus", PASSWORD)))[0] == 200
        assert len(calls) == 1  # bcrypt ran once for this credential; later checks hit the cache
        status, headers, _ = await get(f"{url}/metrics", ctx, basic("prometheus", "wrong"))
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert headers["X-Frame-Options"] == "deny"
        assert (await get(f"{url}/metrics", ctx, basic("nobody", PASSWORD)))[0] == 401
        assert (await get(f"{url}/metrics", ctx))[0] == 401
        assert (await get(f"{url}/healthz", ctx))[0] == 401  # everything is protected
        assert (await get(f"{url}/metrics", ctx, {"Authorization": "Basic !!notbase64"}))[0] == 401
        assert (await get(f"{url}/metrics", ctx, {"Authorization": "Bearer x"}))[0] == 401


async def test_plain_http_to_the_tls_port_gets_no_200(tmp_path, pki):
    async with serving(_write(tmp_path, _tls_config(pki))) as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        try:
            data = await asyncio.wait_for(reader.read(4096), 5)
        except (ConnectionError, TimeoutError):
            data = b""
        writer.close()
        assert b"200 OK" not in data and b"fabricmon_" not in data
        with pytest.raises(aiohttp.ClientError):
            await get(f"http://127.0.0.1:{port}/metrics")


async def test_min_version(tmp_path, pki):
    async with serving(_write(tmp_path, _tls_config(pki, "  min_version: TLS13\n"))) as (port, _):
        assert (await get(f"https://127.0.0.1:{port}/healthz", client_ctx(pki)))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await get(f"https://127.0.0.1:{port}/healthz", client_ctx(pki, max_version=ssl.TLSVersion.TLSv1_2))


async def test_mutual_tls(tmp_path, pki):
    extra = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['client-ca.crt']}\n"
    async with serving(_write(tmp_path, _tls_config(pki, extra))) as (port, _):
        url = f"https://127.0.0.1:{port}/metrics"
        assert (await get(url, client_ctx(pki, "client")))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await get(url, client_ctx(pki))  # no client certificate
        with pytest.raises(aiohttp.ClientError):
            await get(url, client_ctx(pki, "client-foreign"))  # signed by a CA the server does not trust


async def test_client_allowed_sans(tmp_path, pki):
    extra = (f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['client-ca.crt']}\n"
             "  client_allowed_sans: [prometheus.example]\n")
    async with serving(_write(tmp_path, _tls_config(pki, extra))) as (port, _):
        url = f"https://127.0.0.1:{port}/metrics"
        assert (await get(url, client_ctx(pki, "client")))[0] == 200
        assert (await get(url, client_ctx(pki, "client-other-san")))[0] == 403


async def test_rate_limit(tmp_path):
    async with serving(_write(tmp_path, "rate_limit:\n  interval: 1h\n  burst: 2\n")) as (port, _):
        statuses = [(await get(f"http://127.0.0.1:{port}/healthz"))[0] for _ in range(3)]
        assert statuses == [200, 200, 429]


async def _peer_cn(port: int, ctx: ssl.SSLContext) -> str:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    cert = writer.get_extra_info("peercert")
    writer.close()
    return dict(x[0] for x in cert["subject"])["commonName"]


async def test_reload_switches_users_certificate_and_client_ca(tmp_path, pki):
    new_hash = bcrypt.hashpw(b"rotated", bcrypt.gensalt(4)).decode()
    path = _write(tmp_path, _tls_config(pki) + f"basic_auth_users:\n  prometheus: {HASH}\n")
    async with serving(path) as (port, mw):
        url = f"https://127.0.0.1:{port}/metrics"
        assert await _peer_cn(port, client_ctx(pki)) == "fabricmon"
        assert (await get(url, client_ctx(pki), basic("prometheus", PASSWORD)))[0] == 200
        # A broken file fails the reload and changes nothing.
        Path(path).write_text("basic_auth_users: [oops]\n")
        with pytest.raises(WebConfigError, match=path):
            mw.reload()
        assert (await get(url, client_ctx(pki), basic("prometheus", PASSWORD)))[0] == 200
        # Switching HTTPS -> HTTP needs a restart.
        Path(path).write_text(f"basic_auth_users:\n  prometheus: {new_hash}\n")
        with pytest.raises(WebConfigError, match="restart"):
            mw.reload()
        # A rotated certificate, a new password and mutual TLS, all for new connections.
        extra = f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki['client-ca.crt']}\n"
        Path(path).write_text(_tls_config(pki, extra, cert="server2") + f"basic_auth_users:\n  prometheus: {new_hash}\n")
        mw.reload()
        assert await _peer_cn(port, client_ctx(pki, "client")) == "fabricmon-rotated"
        assert (await get(url, client_ctx(pki, "client"), basic("prometheus", PASSWORD)))[0] == 401
        assert (await get(url, client_ctx(pki, "client"), basic("prometheus", "rotated")))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await get(url, client_ctx(pki), basic("prometheus", "rotated"))  # now a client certificate is required
