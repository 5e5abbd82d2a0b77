"""What a node does without its keys (the `security` parameter every node has).

The keys a node's config can name: the command key the shield and the driver share
(`command_key_file`), the authorized principals file of a node that serves signed requests
(`operators_file`), the node's own signing identity (`identity_file`) and the recorder's
file of signing nodes (`publishers_file`). A node without one of those it has:

* `required` (the robot profile): refuses to start, naming each missing key and how to
  make it (`carryon keys init`). What the system cannot establish, it does not run on.
* `optional` (the default: a node started alone, a unit test; `carryon up` and the launch
  file give every node of the simulated graph its keys): runs, and says in its status and
  log what is not verified.
* `insecure`: runs without them on purpose (a bench with no one else on the network); its
  status and every log line about an unverified command say INSECURE.
"""

from __future__ import annotations

from carryon_common.core.config import NodeConfig
from carryon_common.core.errors import ConfigError

KEY_FIELDS = {
    "command_key_file": "the command key the shield and the robot driver share",
    "operators_file": "the authorized principals file (who may ask)",
    "identity_file": "this node's own signing key",
    "publishers_file": "the signing nodes' public keys (the audit)",
}
INSECURE = "INSECURE"


def missing_keys(config: NodeConfig) -> list[str]:
    """The key fields this config has but leaves empty."""
    return [name for name in KEY_FIELDS if getattr(config, name, None) == ""]


def check_security(config: NodeConfig, node_name: str) -> str:
    """The node's security line for its status; ConfigError when `security` is `required`
    and a key is missing."""
    missing = missing_keys(config)
    if config.security == "required" and missing:
        listed = "; ".join(f"{name} ({KEY_FIELDS[name]})" for name in missing)
        raise ConfigError(
            f"{node_name}: security is 'required' (the robot profile) but these are not given: {listed}. "
            "Make the keys with `carryon keys init` (docs/security.md), or set security: insecure to run "
            "without them on purpose."
        )
    if config.security == "insecure":
        return f"{INSECURE} (security: insecure; not verified: {', '.join(missing) or 'nothing'})"
    if missing:
        return f"not secured (no {', '.join(missing)})"
    return f"{config.security}, every key given"


def insecure(config: NodeConfig) -> bool:
    """Whether the node runs without authentication on purpose (its log lines say so)."""
    return config.security == "insecure"
