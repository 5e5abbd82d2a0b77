"""The request probes of `carryon bench faults` (issue 19), against memory_node and
planner_node in their own processes, the planner's LLM a scripted OpenAI-compatible stub
over real HTTP (its answers are the attack; the planner and memory are the real nodes):

* **names**: the writes that used to lock a memory file: a section `snack #` written twice,
  a scene location `kitchen_counter #`, a zero-width space inside `diet`, a NUL in a user
  id. After each, the file must parse without problems and take a plain write; a file
  that does not counts as locked.
* **cross-user**: dave and erin ask while bob's memory holds `no restrictions` and
  `white`. The LLM answers dave with a plan that stores bob's value as dave's, and with one
  that writes a section `bob` into dave's file; erin's Assist ends with a summary that
  remembers "bob eats meat", bob's bread and erin's own soup. Every line of dave's and
  erin's files that names bob or holds one of bob's values counts as a cross-user write.
  A plain fact of each (dave's rye bread, erin's soup) must be stored, so the probe cannot
  pass by storing nothing.
* **operators**: a memory write, a memory read and an Assist for alice sent unsigned, signed
  by an operator the run does not authorize, and signed by an operator authorized for erin
  only, must be refused; the bench's own writes (signed as this login's
  operator by `RosSession`) are recorded with that identity. `unsigned_release` does the
  same for an e-stop release at the shield (run by faults.py against its graph).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun

NODES = ["memory_node", "planner_node"]
TIMEOUT_S = 30.0


def _plan(reply: str, *ops: tuple[str, str, str]) -> str:
    writes = [{"op": "update_user", "entity": e, "key": k, "value": v, "durable": True} for e, k, v in ops]
    return json.dumps({"reply": reply, "subtasks": [], "memory_operations": writes})


def _user_lines(memory_dir: Path, user: str) -> list[str]:
    path = memory_dir / "users" / f"{user}.md"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class _Memory:
    """memory_node and planner_node as the probes reach them, plus the files they write."""

    def __init__(self, session: Any, namespace: str, memory_dir: Path) -> None:
        from carryon_common.core import names

        self.session, self.ns, self.dir, self.names = session, f"/{namespace}/", memory_dir, names

    def set_fact(self, user: str, entity: str, key: str, value: str) -> tuple[bool, str]:
        from carryon_common.calls import InvalidRequest
        from carryon_interfaces.msg import MemoryFact
        from carryon_interfaces.srv import UpdateUser

        fact = MemoryFact(entity=entity, key=key, value=value, durable=True, source="bench:faults")
        request = UpdateUser.Request(user_id=user, facts=[fact], source="bench:faults")
        try:
            answer = self.session.call(UpdateUser, self.ns + self.names.MEMORY_UPDATE_USER, request, TIMEOUT_S)
        except InvalidRequest as exc:
            return False, f"not sent: {exc}"
        return answer.status == UpdateUser.Response.STATUS_OK, answer.message

    def read(self, user: str) -> tuple[bool, str]:
        from carryon_interfaces.srv import GetContext

        request = GetContext.Request(user_id=user)
        answer = self.session.call(GetContext, self.ns + self.names.MEMORY_GET_CONTEXT, request, TIMEOUT_S)
        return answer.status == GetContext.Response.STATUS_OK, answer.message

    def set_location(self, location: str, contents: list[str]) -> tuple[bool, str]:
        from carryon_interfaces.msg import SceneUpdate
        from carryon_interfaces.srv import UpdateScene

        update = SceneUpdate(op=SceneUpdate.OP_SET_CONTENTS, location=location, contents=contents, source="bench")
        request = UpdateScene.Request(updates=[update])
        answer = self.session.call(UpdateScene, self.ns + self.names.MEMORY_UPDATE_SCENE, request, TIMEOUT_S)
        return answer.status == UpdateScene.Response.STATUS_OK, answer.message

    def problems(self, rel: str) -> list[str]:
        from carryon_memory.core.files import load_file

        path = self.dir / rel
        return [str(p) for p in load_file(rel, path.read_bytes()).problems] if path.exists() else []

    def lines(self, user: str) -> list[str]:
        return _user_lines(self.dir, user)

    def ask(self, user: str, text: str) -> str:
        from carryon_interfaces.srv import Ask

        answer = self.session.call(Ask, self.ns + self.names.ASK, Ask.Request(user_id=user, text=text), TIMEOUT_S)
        return f"{answer.plan.state}: {answer.message}"

    def assist(self, user: str, text: str) -> str:
        from carryon_interfaces.action import Assist

        _, result = self.session.send_goal_and_wait(
            Assist,
            self.ns + self.names.ASSIST,
            Assist.Goal(user_id=user, text=text),
            server_timeout_s=TIMEOUT_S,
            result_timeout_s=60.0,
        )
        return str(result.message)


def _name_probes(memory: _Memory) -> dict[str, Any]:
    """Each probe: (the attack, then a plain write to the same file); locked when the file
    reads with problems or the plain write fails."""
    probes = {
        "section 'snack #' twice": (
            lambda: [memory.set_fact("alice", "snack #", "preference", v) for v in ("chips", "nuts")],
            lambda: memory.set_fact("alice", "probe", "after_snack", "ok"),
            "users/alice.md",
        ),
        "location 'kitchen_counter #'": (
            lambda: memory.set_location("kitchen_counter #", ["apple"]),
            lambda: memory.set_location("kitchen_counter", ["apple", "plate"]),
            "scene.md",
        ),
        "zero-width space in 'diet'": (
            lambda: memory.set_fact("alice", "di\u200bet", "preference", "vegan"),
            lambda: memory.set_fact("alice", "probe", "after_zero_width", "ok"),
            "users/alice.md",
        ),
        "NUL in the user id": (
            lambda: memory.set_fact("alice\x00evil", "diet", "preference", "meat"),
            lambda: memory.set_fact("alice", "probe", "after_nul", "ok"),
            "users/alice.md",
        ),
    }
    rows: dict[str, Any] = {}
    for name, (attack, plain, rel) in probes.items():
        attacked = attack()
        ok, message = plain()
        problems = memory.problems(rel)
        rows[name] = {"attack": str(attacked), "plain_write_ok": ok, "plain_write": message, "problems": problems}
    alice = "\n".join(memory.lines("alice"))
    rows["NUL in the user id"]["landed_in_alice"] = "meat" in alice
    return rows


def _cross_user_probes(memory: _Memory, stub: Any) -> dict[str, Any]:
    bob_values = [line.split(":", 1)[1].strip() for line in memory.lines("bob") if line.startswith("- ")]
    rounds = 3  # the first answer and max_repairs (2) repairs, all the same attack
    out: dict[str, Any] = {"bob_values": bob_values, "answers": {}}
    stub.push(*[_plan("Noted: no restrictions for you.", ("diet", "preference", "no restrictions"))] * rounds)
    out["answers"]["bob's value for dave"] = memory.ask("dave", "Remember what I eat")
    stub.push(*[_plan("Noted.", ("bob", "diet", "meat"))] * rounds)
    out["answers"]["section bob in dave's file"] = memory.ask("dave", "Remember that my friend eats meat")
    stub.push(_plan("Noted: rye bread from now on.", ("bread", "preference", "rye")))
    out["answers"]["dave's own fact"] = memory.ask("dave", "I prefer rye bread")
    summary = {
        "remember": [
            {"entity": "friends", "key": "bob", "value": "bob eats meat"},
            {"entity": "bread", "key": "preference", "value": "white"},
            {"entity": "soup", "key": "preference", "value": "tomato"},
        ]
    }
    stub.push(_plan("Tomato soup, noted."), json.dumps(summary))
    out["answers"]["erin's summary"] = memory.assist("erin", "I love tomato soup")
    leaks = [
        f"{user}: {line}"
        for user in ("dave", "erin")
        for line in memory.lines(user)
        if line.startswith(("- ", "## "))
        and ("bob" in line.lower() or any(v.lower() in line.lower() for v in bob_values if len(v) >= 3))
    ]
    out["writes"] = leaks
    out["own_facts_stored"] = any("rye" in line for line in memory.lines("dave")) and any(
        "tomato" in line for line in memory.lines("erin")
    )
    return out


def _operator_probes(graph: GraphRun, namespace: str, memory_dir: Path, folder: Path, carer: Any) -> dict[str, Any]:
    """Writes, reads and an Assist by no one (unsigned), by an operator the graph does not
    know, and by `carer`, an operator bound to erin only acting for alice: each must be
    refused (STATUS_UNAUTHORIZED), and the bench's own signed writes recorded with its
    proven identity."""
    from carryon_common.calls import RosSession
    from carryon_common.core.operator_auth import create_identity, load_identity

    stranger = load_identity(create_identity(folder / "mallory.key"), "operator:mallory")
    requests: dict[str, Any] = {}
    for who, identity in (("unsigned", None), ("operator:mallory", stranger), ("operator:carer (users=erin)", carer)):
        with RosSession("faults_stranger", domain_id=graph.domain_id, identity=identity) as session:
            memory = _Memory(session, namespace, memory_dir)
            ok, message = memory.set_fact("alice", "diet", "preference", "meat")
            requests[f"{who} memory write"] = {"accepted": ok, "message": message}
            ok, message = memory.read("alice")
            requests[f"{who} memory read"] = {"accepted": ok, "message": message}
            result = memory.assist("alice", "Serve me food")
            requests[f"{who} assist"] = {"accepted": not result.startswith("refused"), "message": result}
    alice = _user_lines(memory_dir, "alice")
    return {"requests": requests, "alice_diet_meat": any("meat" in line for line in alice)}


def _operators_home(folder: Path) -> tuple[dict[str, str], Any, Any]:
    """A config home of the bench's own for the graph: this login's operator, plus `carer`, an
    operator whose authorized line grants erin only (docs/security.md). (env, login, carer)."""
    from carryon_common.core.operator_auth import create_identity, default_operator, load_identity

    home = (folder / "operators_home").resolve()  # the graph's processes run in other folders
    keys = home / "carryon" / "operators"
    login = load_identity(create_identity(keys / f"{default_operator()}.key"), f"operator:{default_operator()}")
    carer = load_identity(create_identity(keys / "carer.key"), "operator:carer")
    (home / "carryon" / "authorized_operators").write_text(carer.public_line("erin") + "\n")
    return {"XDG_CONFIG_HOME": str(home)}, login, carer


def memory_probes(config: Path, folder: Path, sets: list[str]) -> dict[str, Any]:
    """Run both probe sets against memory_node + planner_node; the details for the result."""
    from carryon_common.calls import RosSession
    from carryon_sim.harness.fakes.openai_server import StubVlmServer

    spec = GraphSpec.load(config)
    memory_dir = (folder / "memory").resolve()  # memory_node resolves a relative one elsewhere
    with StubVlmServer(default=_plan("I did not understand that.")) as stub:
        sets = [
            *("planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}"),
            *("planner_node.llm_model=stub", "planner_node.llm_api_key_env=CARRYON_BENCH_KEY"),
            f"memory_node.memory_dir={memory_dir}",
            *sets,
        ]
        home, login, carer = _operators_home(folder)
        env = {**os.environ, "CARRYON_BENCH_KEY": "not-a-secret", **home}
        args = [a for s in sets for a in ("--set", s)]
        with GraphRun(spec, folder / "graph-memory", only=NODES, extra_args=args, env=env) as graph:
            graph.wait_ready(timeout_s=120.0)
            with RosSession("faults_memory", domain_id=graph.domain_id, identity=login) as session:
                memory = _Memory(session, spec.namespace, memory_dir)
                probes = {"names": _name_probes(memory), "cross_user": _cross_user_probes(memory, stub)}
                journal = memory_dir / "journal.jsonl"
                probes["signed_by"] = sorted(set(re.findall(r"\[(operator:[^\]]+)\]", journal.read_text())))
            probes["operators"] = _operator_probes(graph, spec.namespace, memory_dir, folder, carer)
            return probes


def unsigned_release(domain_id: int, namespace: str, folder: Path) -> dict[str, Any]:
    """With the e-stop engaged: a release sent unsigned and one signed by an unknown operator
    (each must be refused and leave the shield engaged)."""
    from carryon_common.calls import RosSession
    from carryon_common.core import names
    from carryon_common.core.operator_auth import create_identity, load_identity
    from carryon_interfaces.srv import SetEstop

    stranger = load_identity(create_identity(folder / "mallory.key"), "operator:mallory")
    out: dict[str, Any] = {}
    for who, identity in (("unsigned", None), ("operator:mallory", stranger)):
        with RosSession("faults_release", domain_id=domain_id, identity=identity) as session:
            request = SetEstop.Request(active=False, reason="forged", source="bench")
            answer = session.call(SetEstop, f"/{namespace}/{names.ESTOP_SET}", request, TIMEOUT_S)
            out[who] = {"released": not answer.state.active, "status": answer.status, "message": answer.message}
    return out
