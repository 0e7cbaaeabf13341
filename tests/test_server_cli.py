"""``kforge serve`` as a command: parses its options, prints the dev token, serves, stops on SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from kforge.cli import server as server_cli

SRC = Path(__file__).resolve().parents[1] / "src"
RUN = """
import argparse, sys
from kforge.cli import server as server_cli
parser = argparse.ArgumentParser(prog="kforge")
server_cli.add_commands(parser.add_subparsers(dest="command"))
args = parser.parse_args(sys.argv[1:])
raise SystemExit(args.handler(args))
"""


def test_serve_options_and_defaults() -> None:
    parser = argparse.ArgumentParser(prog="kforge")
    server_cli.add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve"])
    assert (args.host, args.port, args.data_dir, args.tier) == ("127.0.0.1", 8470, None, "auto")
    assert args.handler is server_cli.command_serve
    args = parser.parse_args(
        ["serve", "--port", "9000", "--data-dir", "/tmp/x", "--tier", "reference"]
    )
    assert (args.port, args.data_dir, args.tier) == (9000, "/tmp/x", "reference")


def test_serve_prints_the_dev_token_and_serves_the_data_dir(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", RUN, "serve", "--port", str(port), "--data-dir", str(tmp_path)]
    environment = {**os.environ, "PYTHONPATH": str(SRC)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=environment)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == f"kforge serve: listening on http://127.0.0.1:{port}\n"
        dashboard = process.stdout.readline()
        token = dashboard.split("#token=")[1].strip()
        base = f"http://127.0.0.1:{port}"
        me = httpx.get(base + "/v1/whoami", headers={"authorization": f"Bearer {token}"}).json()
        assert me["operator"] is True
        assert httpx.get(base + "/dashboard/").text.startswith("<!doctype html>")
        created = httpx.post(
            base + "/v1/programs",
            json={"assembly": "HALT"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert created.status_code == 201
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        assert (tmp_path / "vault.sqlite3").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
        if process.stdout is not None:
            process.stdout.close()
