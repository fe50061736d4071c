"""``butler key show|rotate``: this agent's identity key in its data folder.

``rotate`` takes the data folder's lock, so it runs with the daemon stopped: a running
daemon keeps signing with the key it started with, and the next start signs with the new
one. The old key signs the new one; the card carries that statement, so callers that
pinned the old key follow the change instead of refusing it (docs/receipts.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from butler.cli.json_output import error_json, json_flag, print_json
from butler.cli.serve import agent_arg, load_or_exit
from butler.identity.key_file import KEY_FILE, read_identity, rotate_identity
from butler.storage.data_folder import hold_data_folder
from internal.protocol.a2a.model import SetupError


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    key = sub.add_parser("key", help="show or rotate this agent's identity key")
    ksub = key.add_subparsers(dest="key_command", metavar="ACTION", required=True)
    show = ksub.add_parser("show", help="print the key's id (kid) and its public JWK")
    rotate = ksub.add_parser("rotate", help="make a new key, signed by the old one "
                                            "(stop the daemon first)")
    for p, fn in ((show, _show), (rotate, _rotate)):
        p.add_argument("-c", "--config", default=os.environ.get("BUTLER_CONFIG"))
        agent_arg(p)
        json_flag(p)
        p.set_defaults(handler=fn)


def _show(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, secrets=False, agent=args.agent,  # its data folder
                          as_json=args.json)
    if config is None:
        return 2
    try:
        identity = read_identity(config.data_dir)
    except SetupError as err:
        return _failed(args, err.code, err.message, 2)
    if identity is None:
        return _failed(args, "no_identity_key", f"no identity key at "
                       f"{config.data_dir / KEY_FILE} yet: the daemon makes it on its first "
                       "start", 1)
    shown = {"kid": identity.kid, "public_key": identity.key.public.jwk,
             "rotations": len(identity.rotations), "file": str(config.data_dir / KEY_FILE)}
    if args.json:
        print_json(shown)
        return 0
    print(f"kid: {identity.kid}")
    print(f"public key (JWK): {json.dumps(shown['public_key'], separators=(',', ':'))}")
    print(f"rotations: {len(identity.rotations)}")
    print(f"file: {shown['file']} (back it up: peers that pinned this key refuse another)")
    return 0


def _failed(args: argparse.Namespace, code: str, message: str, exit_code: int) -> int:
    print(f"butler: {code}: {message}", file=sys.stderr)
    if args.json:
        print_json(error_json(code, message))
    return exit_code


def _rotate(args: argparse.Namespace) -> int:
    config = load_or_exit(args.config, secrets=False, agent=args.agent, as_json=args.json)
    if config is None:
        return 2
    try:
        with hold_data_folder(config.data_dir):
            old, new = rotate_identity(config.data_dir)
    except SetupError as err:
        return _failed(args, err.code, err.message, 2)
    if args.json:
        print_json({"old_kid": old.kid, "kid": new.kid})
        return 0
    print(f"rotated: {old.kid} -> {new.kid} (the old key signed the new one); start the "
          "daemon to sign with it")
    return 0
