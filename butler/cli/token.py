"""``butler token new|hash``: make a token for a peer and the hash for the config."""

from __future__ import annotations

import argparse
import sys

from butler.cli.json_output import json_flag, print_json
from internal.tokens import hash_token, new_token


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tok = sub.add_parser("token", help="generate bearer tokens and their SHA-256 hashes")
    tsub = tok.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    new = tsub.add_parser(
        "new", help="print a new random token and its hash",
        description="Prints a 32-byte random token (give it to the peer that will call you) "
                    "and its SHA-256 (paste it into configurations.a2a.token_hashes).")
    json_flag(new, "print {token, sha256} as JSON")
    new.set_defaults(handler=_new)
    hsh = tsub.add_parser(
        "hash", help="read a token on stdin and print its SHA-256",
        description="Reads a token on standard input (one trailing newline ignored) and "
                    "prints its SHA-256 hex, the same as `echo -n TOKEN | sha256sum`. Warns "
                    "when the token is a known weak one or shorter than 128 bits.")
    json_flag(hsh, "print {sha256, warning} as JSON (warning: null for a strong token)")
    hsh.set_defaults(handler=_hash)


def _new(args: argparse.Namespace) -> int:
    token = new_token()
    digest = hash_token(token)
    if args.json:
        print_json({"token": token, "sha256": digest})
    else:
        print(f"token:  {token}   (give this to your peer; keep it secret)")
        print(f"sha256: {digest}   (paste this into configurations.a2a.token_hashes)")
    return 0


def _hash(args: argparse.Namespace) -> int:
    # Here, not at the top: importing butler.config loads the HTTP stack, which
    # ``token new`` does not need and should not wait for.
    from butler.config.weak_tokens import MIN_TOKEN_BITS, estimated_bits, weakness

    data = sys.stdin.buffer.read()
    # Exactly one line ending goes (what `echo` adds); anything more is part of the token.
    token = data.removesuffix(b"\n").removesuffix(b"\r") if data.endswith(b"\n") else data
    if not token:
        print("butler: no token on standard input", file=sys.stderr)
        return 2
    digest = hash_token(token)
    warning = weakness(digest)
    if warning is not None:
        warning = f"this {warning}; make one with `butler token new`"
    else:
        bits = estimated_bits(token.decode("utf-8", "replace"))
        if bits < MIN_TOKEN_BITS:
            warning = (f"this token carries at most {bits:.0f} bits, fewer than "
                       f"{MIN_TOKEN_BITS}: a guesser could find it; make one with "
                       "`butler token new`")
    if warning is not None:
        print(f"butler token hash: warning: {warning}", file=sys.stderr)
    if args.json:
        print_json({"sha256": digest, "warning": warning})
    else:
        print(digest)
    return 0
