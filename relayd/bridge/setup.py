"""`relayctl bridge setup`: a NATS authorization for a team of hosts, and each host's key.

Each host gets an nkey (an Ed25519 key pair): nats-server keeps only the public key, with
the permissions of `subjects.permissions`, and the host signs the server's challenge
with its seed at every connection, so the secret never crosses the network. Written:

* `<host>.creds` per host (0600): JSON `{"host": NAME, "seed": "SU..."}`, given to
  `relayd --bridge-creds`;
* `admin.creds` (0600): the operator's key, `{"role": "admin", "seed": ...}`, the only one
  that may make and change the stream and buckets (`relayctl bridge provision`, `streams`);
  it stays with the operator, never on a host;
* `auth.conf`: the nats-server `authorization` block (public keys and permissions only);
* `nats-server.conf`: listen address, JetStream and `include auth.conf`, to start from.

Run again with more names to add hosts: existing `.creds` files keep their keys. Run again
after an upgrade to rewrite `auth.conf` with the permissions this version gives (the admin
key is added if missing), then reload the server and run `relayctl bridge provision`.
Needs the `nkeys` package (the extra `relay-bus[bridge]`); nats-py is not imported.
"""

from __future__ import annotations

import json
import os

import msgspec

from relayd.errors import UsageError, missing_extra
from relayd.names import check_agent_name

from . import subjects

AUTH_FILE = "auth.conf"
ADMIN_FILE = "admin.creds"
SERVER_FILE = "nats-server.conf"
CREDS_SUFFIX = ".creds"


class Credentials(msgspec.Struct, kw_only=True):
    """A host's `.creds` file."""

    host: str
    seed: str


class AdminCredentials(msgspec.Struct, kw_only=True):
    """`admin.creds`: the key that makes the stream and buckets."""

    role: str
    seed: str


_creds_decoder = msgspec.json.Decoder(Credentials)
_admin_decoder = msgspec.json.Decoder(AdminCredentials)


def load_admin(folder: str) -> AdminCredentials:
    """The admin key of a setup directory; a one-line UsageError for anything wrong with it."""
    path = os.path.join(os.path.expanduser(folder), ADMIN_FILE)
    try:
        with open(path, "rb") as fh:
            admin = _admin_decoder.decode(fh.read(64 * 1024))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc} (relayctl bridge setup writes it; run it again to add one)") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UsageError(f"{path}: not a relay admin key ({exc})") from None
    if admin.role != "admin" or not admin.seed.startswith("SU"):
        raise UsageError(f"{path}: not a relay admin key")
    return admin


def load_credentials(path: str) -> Credentials:
    """Read and check a `.creds` file; a one-line UsageError for anything wrong with it."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(64 * 1024)
        creds = _creds_decoder.decode(raw)
    except OSError as exc:
        raise UsageError(f"--bridge-creds {path}: {exc.strerror or exc}") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UsageError(f"--bridge-creds {path}: not a relay credentials file ({exc}); make one with relayctl bridge setup") from None
    check_agent_name(creds.host, "host name")
    if not creds.seed.startswith("SU"):
        raise UsageError(f"--bridge-creds {path}: the seed is not a NATS user nkey seed (SU...)")
    if os.stat(path).st_mode & 0o077:
        raise UsageError(f"--bridge-creds {path}: readable by other users; chmod 600 {path}")
    return creds


def _nkeys():
    try:
        # deferred imports: nkeys is the optional bridge extra; a missing one is reported by
        # missing_extra
        import nkeys
    except ImportError:
        raise missing_extra("relayctl bridge setup", "bridge", "nkeys") from None
    return nkeys


def new_seed() -> str:
    nkeys = _nkeys()
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()


def public_key(seed: str) -> str:
    pair = _nkeys().from_seed(bytearray(seed.encode()))
    try:
        return pair.public_key.decode()
    finally:
        pair.wipe()


def _write(folder: int, name: str, data: bytes) -> None:
    """Replace `name` in `folder` atomically, mode 0600 from the start."""
    temp = f".{name}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=folder)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)


def _conf_list(items: list[str], indent: str) -> str:
    return "[\n" + "".join(f"{indent}  {json.dumps(item)}\n" for item in items) + f"{indent}]"


def _user(comment: str, key: str, perms: dict[str, dict[str, list[str]]]) -> str:
    return (
        f"    # {comment}\n"
        f"    {{\n"
        f"      nkey: {key}\n"
        f"      permissions: {{\n"
        f"        publish: {{ allow: {_conf_list(perms['publish']['allow'], '        ')} }}\n"
        f"        subscribe: {{ allow: {_conf_list(perms['subscribe']['allow'], '        ')} }}\n"
        f"      }}\n"
        f"    }}\n"
    )


def auth_conf(keys: dict[str, str], admin_key: str) -> str:
    """The nats-server `authorization` block for hosts -> public keys, and the admin key."""
    users = [_user("admin: makes the stream and buckets (relayctl bridge provision)", admin_key, subjects.admin_permissions())]
    users += [_user(f"host {host}", key, subjects.permissions(host, sorted(keys))) for host, key in sorted(keys.items())]
    return (
        "# relay bridge: one nkey user per host, each allowed to write only subjects that\n"
        "# carry its own name (docs/bridge.md). Written by relayctl bridge setup.\n"
        "authorization {\n  users = [\n" + "".join(users) + "  ]\n}\n"
    )


def server_conf(listen: str, store_dir: str) -> str:
    return (
        "# A starting point: change listen, add a tls { cert_file, key_file } block (docs/bridge.md).\n"
        f"listen: {json.dumps(listen)}\n"
        f"jetstream {{ store_dir: {json.dumps(store_dir)} }}\n"
        f"include {AUTH_FILE}\n"
    )


def setup(hosts: list[str], out: str, listen: str = "127.0.0.1:4222") -> dict:
    names = []
    for host in hosts:
        name = check_agent_name(host.strip(), "host name")
        if name not in names:
            names.append(name)
    if not names:
        raise UsageError("--hosts: give at least one host name, e.g. --hosts laptop,gpu-box")
    out = os.path.abspath(os.path.expanduser(out))
    os.makedirs(out, mode=0o700, exist_ok=True)
    folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        keys: dict[str, str] = {}
        made, kept = [], []
        for name in names:
            path = os.path.join(out, name + CREDS_SUFFIX)
            if os.path.exists(path):
                creds = load_credentials(path)
                if creds.host != name:
                    raise UsageError(f"{path} holds the key of host {creds.host}, not {name}; move it away")
                kept.append(name)
            else:
                creds = Credentials(host=name, seed=new_seed())
                _write(folder, name + CREDS_SUFFIX, msgspec.json.encode(creds) + b"\n")
                made.append(name)
            keys[name] = public_key(creds.seed)
        if os.path.exists(os.path.join(out, ADMIN_FILE)):
            admin = load_admin(out)
        else:
            admin = AdminCredentials(role="admin", seed=new_seed())
            _write(folder, ADMIN_FILE, msgspec.json.encode(admin) + b"\n")
        _write(folder, AUTH_FILE, auth_conf(keys, public_key(admin.seed)).encode())
        if not os.path.exists(os.path.join(out, SERVER_FILE)):
            _write(folder, SERVER_FILE, server_conf(listen, out).encode())
        os.fsync(folder)
    finally:
        os.close(folder)
    return {
        "dir": out,
        "hosts": names,
        "created": made,
        "kept": kept,
        "auth_conf": os.path.join(out, AUTH_FILE),
        "admin": os.path.join(out, ADMIN_FILE),
        "server_conf": os.path.join(out, SERVER_FILE),
        "creds": {name: os.path.join(out, name + CREDS_SUFFIX) for name in names},
    }
