#!/usr/bin/env python3
"""Ask the real dstack about every task config in test/vectors/dstack/cases/ (and every service
config in test/vectors/dstack/services/) and record its answers.

Run by hand only; CI never runs this (CI must not need dstack). In a scratch virtualenv:

    python3 -m venv /tmp/dstack-ref && /tmp/dstack-ref/bin/pip install dstack==0.21.2
    /tmp/dstack-ref/bin/python scripts/dstack-vectors.py write   # (re)writes expected.json
    /tmp/dstack-ref/bin/python scripts/dstack-vectors.py check   # compares, exits 1 on a difference

Services need dstack 0.22.5 (replica groups with a router came after 0.21.2):

    python3 -m venv /tmp/dstack-venv && /tmp/dstack-venv/bin/pip install 'dstack[server]==0.22.5'
    /tmp/dstack-venv/bin/python scripts/dstack-vectors.py write-services   # services-expected.json
    /tmp/dstack-venv/bin/python scripts/dstack-vectors.py check-services

Each case goes through the same stages as `dstack apply` followed by the server's planning, with
dstack's own functions: YAML -> configuration model -> the CLI's env and command interpolation ->
the server's run-spec validation and defaults -> the task job configurator. No server, database or
network is used: the only stub is the image registry lookup (see README.md in the vectors folder).

A case file starts with `#` header lines this script reads (everything else is the config):
    # field: groups[1].name        field path a refusal must name (alternatives separated by " | ",
                                   `-` for none)
    # hint: ...                    why it is refused, in our words
    # troupe: valid|invalid        Troupe's intended answer where it differs from dstack's
    # dstack: no-check             dstack has no such check (it accepts); Troupe decides
    # why: ...                     the reason for a `troupe:` or `dstack:` override
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator, Optional

import gpuhunt
import yaml
from dstack import version as dstack_version
from dstack._internal.cli.services.configurators.run import ServiceConfigurator, TaskConfigurator
from dstack._internal.core.errors import ConfigurationError, ServerClientError
from dstack._internal.core.models.configurations import ServiceConfiguration, TaskConfiguration, parse_apply_configuration
from dstack._internal.core.models.runs import RunSpec
from dstack._internal.server.services.docker import ImageConfig
from dstack._internal.server.services.jobs.configurators import base as job_configurator_base
from dstack._internal.server.services.jobs.configurators.service import ServiceJobConfigurator
from dstack._internal.server.services.jobs.configurators.task import TaskJobConfigurator
from dstack._internal.server.services.runs.spec import validate_run_spec_and_set_defaults
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "test" / "vectors" / "dstack"
CASES = VECTORS / "cases"
EXPECTED = VECTORS / "expected.json"
SERVICE_CASES = VECTORS / "services"
SERVICE_EXPECTED = VECTORS / "services-expected.json"

# A config without `name` gets a random name from the dstack server; the corpus fixes it.
RUN_NAME = "corpus-run"
# The submitting shell as the corpus sees it (bare `KEY` entries in `env` read from here).
ENVIRON = {
    "HF_TOKEN": "hf_corpus_token",
    "WANDB_API_KEY": "wandb-corpus-key",
    "MODEL_ID": "shell-model-id",
}

HEADER = re.compile(r"^#\s*(field|hint|troupe|dstack|why):\s*(.*?)\s*$")


class Refusal(Exception):
    def __init__(self, stage: str, error: BaseException, loc: Optional[str] = None):
        super().__init__(stage)
        self.stage = stage
        self.error = error
        self.loc = loc


def read_header(text: str) -> dict[str, str]:
    header: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = HEADER.match(line)
        if m:
            header[m.group(1)] = m.group(2)
    return header


def loc_to_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a field path: ('task', 'groups', 1, 'name') -> groups[1].name."""
    path = ""
    for part in loc:
        if part in ("task", "service") and path == "":
            continue
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(part)):
            path += ("." if path else "") + str(part)
        # Other parts are pydantic's internal union/validator tags; a path does not name them.
    return path


@contextmanager
def shell_environ(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def stub_registry() -> None:
    """No registry is contacted: every image reads as multi-arch, with a CMD and no USER.

    With a multi-arch image dstack leaves `cpu.arch` unset, which is also what Troupe does
    (it never asks a registry). A single-arch image would make dstack pin that arch.
    """

    def image_config(image: str, registry_auth: Any) -> tuple[ImageConfig, set[Any]]:
        return ImageConfig(Cmd=["/bin/sh"]), {gpuhunt.CPUArchitecture.X86, gpuhunt.CPUArchitecture.ARM}

    job_configurator_base._get_image_config_and_cpu_architectures = image_config


def number(v: Any) -> Any:
    if v is None:
        return None
    f = float(v)
    return int(f) if f.is_integer() else f


def range_json(r: Any) -> Optional[dict[str, Any]]:
    if r is None:
        return None
    return {"min": number(r.min), "max": number(r.max)}


def resources_json(res: Any) -> dict[str, Any]:
    gpu = res.gpu
    return {
        "cpu": {"arch": res.cpu.arch.value if res.cpu.arch else None, "count": range_json(res.cpu.count)},
        "memory": range_json(res.memory),
        "disk": range_json(res.disk.size) if res.disk is not None else None,
        "gpu": {
            "vendor": gpu.vendor.value if gpu.vendor else None,
            "name": list(gpu.name) if gpu.name else None,
            "count": range_json(gpu.count),
            "memory": range_json(gpu.memory),
        },
    }


def ports_json(ports: list[Any]) -> list[dict[str, Any]]:
    return [{"container_port": p.container_port, "local_port": p.local_port} for p in ports]


def parse_config(text: str, kind: type) -> Any:
    """YAML, then dstack's configuration model; the configuration must be of `kind`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise Refusal("yaml", e)
    try:
        conf = parse_apply_configuration(data)
    except ConfigurationError as e:
        cause = e.args[0] if e.args else None
        loc = None
        if isinstance(cause, ValidationError) and cause.errors():
            loc = loc_to_path(tuple(cause.errors()[0]["loc"]))
        raise Refusal("parse", cause if isinstance(cause, BaseException) else e, loc)
    if not isinstance(conf, kind):
        raise Refusal("parse", TypeError(f"not a {kind.__name__}: {conf.type}"))
    return conf


def submit(conf: Any, configurator: Any, file: str) -> RunSpec:
    """What `dstack apply` does on the client, then the server's run-spec validation and defaults."""
    parser = argparse.ArgumentParser()
    configurator.register_args(parser)
    args = parser.parse_args([])
    with shell_environ(ENVIRON):
        try:
            configurator(api_client=None).apply_args(conf, args)
        except (ConfigurationError, ValueError) as e:
            raise Refusal("client", e)
    run_spec = RunSpec(
        run_name=conf.name or RUN_NAME,
        configuration=conf,
        configuration_path=file,
        ssh_key_pub="ssh-ed25519 AAAAcorpus corpus",
    )
    user = SimpleNamespace(ssh_public_key="ssh-ed25519 AAAAcorpus corpus")
    try:
        validate_run_spec_and_set_defaults(user, run_spec)  # type: ignore[arg-type]
    except ServerClientError as e:
        raise Refusal("server", e)
    return run_spec


def ask_dstack(text: str, file: str) -> dict[str, Any]:
    """The plan and run settings dstack derives from one config; raises Refusal where it refuses."""
    conf = parse_config(text, TaskConfiguration)
    # Commands as written: the plan keeps them uninterpolated.
    written = [list(g.commands) for g in conf.node_groups]

    run_spec = submit(conf, TaskConfigurator, file)
    try:
        job_specs = asyncio.run(TaskJobConfigurator(run_spec).get_job_specs(replica_num=0))
    except ServerClientError as e:
        raise Refusal("server", e)

    groups = run_spec.configuration.node_groups
    plan_groups = []
    for index, group in enumerate(groups):
        first = next(j for j in job_specs if j.node_group_index == index)
        plan_groups.append(
            {
                "index": index,
                "name": group.name,
                "nodes": group.nodes,
                "resources": resources_json(first.requirements.resources),
            }
        )
    plan_jobs = [
        {
            "job_num": j.job_num,
            "job_name": j.job_name,
            "node_group_index": j.node_group_index,
            "node_group_name": j.node_group_name,
            "node_group_job_index": j.node_group_job_index,
            "global_master": j.job_num == 0,
            "group_master": j.node_group_job_index == 0,
            "commands": written[j.node_group_index],
            "ports": ports_json(groups[j.node_group_index].ports),
        }
        for j in job_specs
    ]
    profile = run_spec.merged_profile
    retry = job_specs[0].retry
    return {
        "plan": {
            "run_name": run_spec.run_name,
            "nodes_num": run_spec.configuration.nodes_num,
            "groups": plan_groups,
            "jobs": plan_jobs,
        },
        # Settings outside planToJson's shape that the Plan still carries; unset ones as dstack
        # treats them (startup_order None behaves as `any`, stop_criteria None as `all-done`).
        "run": {
            "env": job_specs[0].env,
            "startup_order": profile.startup_order.value if profile.startup_order else "any",
            "stop_criteria": profile.stop_criteria.value if profile.stop_criteria else "all-done",
            "retry": (
                {"on_events": [e.value for e in retry.on_events], "duration_s": int(retry.duration)}
                if retry is not None
                else None
            ),
            "max_duration_s": job_specs[0].max_duration,
            "working_dir": run_spec.configuration.working_dir,
        },
    }


def escape_for_dstack(text: str) -> str:
    """Hides `$${{ ... }}` from dstack, whose CLI unescapes it before the server checks references."""
    return text.replace("$${{", "$$((")


def vector(path: Path, ask: Any = None, keys: tuple[str, ...] = ("plan", "run")) -> dict[str, Any]:
    """One case's entry: dstack's verdict, and Troupe's answer (`keys` of dstack's when valid)."""
    ask = ask or ask_dstack
    text = path.read_text(encoding="utf-8")
    header = read_header(text)
    entry: dict[str, Any] = {"file": path.name}
    try:
        answer = ask(text, f"{path.parent.name}/{path.name}")
        verdict, refusal = "accepted", None
    except Refusal as r:
        answer, verdict, refusal = None, "rejected", r

    troupe = header.get("troupe")
    if header.get("dstack") == "no-check":
        if verdict != "accepted":
            raise SystemExit(f"{path.name}: marked no-check but dstack refuses it ({refusal.stage})")
        verdict = "no-check"
    valid = {"valid": True, "invalid": False}[troupe] if troupe else verdict == "accepted"
    if troupe and verdict == ("accepted" if valid else "rejected"):
        raise SystemExit(f"{path.name}: `troupe: {troupe}` but dstack already agrees; drop the override")
    if (troupe or verdict == "no-check") and not header.get("why"):
        raise SystemExit(f"{path.name}: an override needs `# why:`")
    if valid and answer is None and "$${{" in text and ask is ask_dstack:
        answer = ask_dstack(escape_for_dstack(text), f"cases/{path.name}")
        # The plan keeps the commands as written.
        written = yaml.safe_load(text)
        for job in answer["plan"]["jobs"]:
            group = (written.get("groups") or [written])[job["node_group_index"]]
            job["commands"] = list(group.get("commands") or [])
    if valid and answer is None:
        raise SystemExit(f"{path.name}: Troupe answer is valid but no plan could be derived")

    entry["valid"] = valid
    entry["dstack"] = verdict
    if refusal is not None:
        entry["dstack_stage"] = refusal.stage
        entry["dstack_error"] = type(refusal.error).__name__
        if refusal.loc:
            entry["dstack_loc"] = refusal.loc
    if not valid:
        if "field" not in header or "hint" not in header:
            raise SystemExit(f"{path.name}: an invalid case needs `# field:` and `# hint:`")
        # `-`: nothing to name (a YAML syntax error has a position but no field path).
        fields = [f.strip() for f in header["field"].split("|")]
        entry["field"] = [] if fields == ["-"] else fields
        entry["hint"] = header["hint"]
        entry[keys[0]] = None
    else:
        for key in keys:
            entry[key] = answer[key]
    if "why" in header:
        entry["why"] = header["why"]
    return entry


def build() -> dict[str, Any]:
    stub_registry()
    files = sorted(CASES.glob("*.yml"))
    return {
        "generator": "scripts/dstack-vectors.py",
        "dstack_version": dstack_version.__version__,
        "run_name_default": RUN_NAME,
        "environ": ENVIRON,
        "cases": [vector(f) for f in files],
    }


def compare_services(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return compare(old, new, ("valid", "dstack", "dstack_stage", "dstack_error", "dstack_loc", "service"))


def compare(
    old: dict[str, Any],
    new: dict[str, Any],
    keys: tuple[str, ...] = ("valid", "dstack", "dstack_stage", "dstack_error", "dstack_loc", "plan", "run"),
) -> list[str]:
    problems = []
    old_cases = {c["file"]: c for c in old["cases"]}
    for case in new["cases"]:
        before = old_cases.pop(case["file"], None)
        if before is None:
            problems.append(f"{case['file']}: not in expected.json")
            continue
        for key in keys:
            if before.get(key) != case.get(key):
                problems.append(
                    f"{case['file']}: {key} differs\n  recorded: {json.dumps(before.get(key))}\n"
                    f"  dstack {new['dstack_version']}: {json.dumps(case.get(key))}"
                )
    problems += [f"{name}: in expected.json but no case file" for name in old_cases]
    return problems


def probe_json(p: Any) -> dict[str, Any]:
    return {
        "type": p.type,
        "url": p.url,
        "method": p.method,
        "headers": [{"name": h.name, "value": h.value} for h in p.headers],
        "body": p.body,
        "timeout_s": int(p.timeout),
        "interval_s": int(p.interval),
        "ready_after": p.ready_after,
        "until_ready": p.until_ready,
    }


def scaling_json(sc: Any) -> Optional[dict[str, Any]]:
    if sc is None:
        return None
    return {
        "metric": sc.metric,
        "target": number(sc.target),
        "window_s": int(sc.window) if sc.window is not None else 60,
        "scale_up_delay_s": int(sc.scale_up_delay),
        "scale_down_delay_s": int(sc.scale_down_delay),
    }


def ask_dstack_service(text: str, file: str) -> dict[str, Any]:
    """The service's settings and replica groups as dstack derives them; raises Refusal where it refuses."""
    conf = parse_config(text, ServiceConfiguration)
    try:
        written = [list(g.commands) for g in conf.replica_groups]
    except ValidationError as e:
        # dstack builds the implicit group lazily; a bad one fails there (a server error, not a 400).
        raise Refusal("server", e)

    run_spec = submit(conf, ServiceConfigurator, file)
    groups = run_spec.configuration.replica_groups
    try:
        specs = [
            asyncio.run(ServiceJobConfigurator(run_spec, replica_group_name=g.name).get_job_specs(replica_num=0))[0]
            for g in groups
        ]
    except ServerClientError as e:
        raise Refusal("server", e)

    model = conf.model
    router = next((i for i, g in enumerate(groups) if g.router is not None), None)
    return {
        "service": {
            "run_name": run_spec.run_name,
            "port": conf.port.container_port,
            "auth": conf.auth,
            "strip_prefix": conf.strip_prefix,
            "model": {"name": model.name, "prefix": model.prefix} if model is not None else None,
            "rate_limits": [
                {
                    "prefix": r.prefix,
                    "rps": number(r.rps),
                    "burst": r.burst,
                    "key": {"type": "header", "header": r.key.header} if r.key.type == "header" else {"type": "ip_address"},
                }
                for r in conf.rate_limits
            ],
            "router_group": router,
            "groups": [
                {
                    "index": i,
                    "name": g.name,
                    "replicas": {"min": g.replicas.min, "max": g.replicas.max},
                    "scaling": scaling_json(g.scaling),
                    "router": g.router.type.value if g.router is not None else None,
                    "commands": written[i],
                    "resources": resources_json(specs[i].requirements.resources),
                    "probes": [probe_json(p) for p in specs[i].probes],
                }
                for i, g in enumerate(groups)
            ],
        }
    }


def build_services() -> dict[str, Any]:
    stub_registry()
    return {
        "generator": "scripts/dstack-vectors.py",
        "dstack_version": dstack_version.__version__,
        "run_name_default": RUN_NAME,
        "environ": ENVIRON,
        "cases": [vector(f, ask_dstack_service, ("service",)) for f in sorted(SERVICE_CASES.glob("*.yml"))],
    }


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    services = mode.endswith("-services")
    action = mode.removesuffix("-services")
    if action not in ("write", "check"):
        print("usage: dstack-vectors.py write|check|write-services|check-services", file=sys.stderr)
        return 2
    result = build_services() if services else build()
    expected = SERVICE_EXPECTED if services else EXPECTED
    if action == "write":
        expected.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        valid = sum(1 for c in result["cases"] if c["valid"])
        print(f"wrote {expected.relative_to(ROOT)}: {len(result['cases'])} cases, {valid} valid, "
              f"{len(result['cases']) - valid} invalid (dstack {result['dstack_version']})")
        return 0
    old = json.loads(expected.read_text(encoding="utf-8"))
    problems = compare_services(old, result) if services else compare(old, result)
    for p in problems:
        print(p)
    print(f"dstack {result['dstack_version']}: {len(problems)} difference(s){' in services' if services else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
