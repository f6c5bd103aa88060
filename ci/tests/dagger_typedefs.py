"""Print the Dagger module's registration as JSON, without an engine.

Run as a script (``python ci/tests/dagger_typedefs.py``): it sets the variables
the Dagger runtime sets, imports ci/src/rankgate_ci, and runs the SDK's own
registration with ``Module.id`` replaced so the type definitions it would send to
the engine come back as data. Output: {"constructor": {...}, "functions": {...}}.

:func:`registered` runs it once per test run for the fixtures that ask (ci/tests' and
tests/pipeline's ``registered``): it imports the SDK, about 2 CPU-s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def registered(request) -> dict:
    """The module's functions and arguments as its SDK registers them (no engine), for the
    session fixture ``request`` sets up: computed by the first xdist worker that asks."""
    import pytest
    from tests.once import once_per_run

    pytest.importorskip("dagger", reason="dagger-io is in the dev extra: pip install -e '.[dev]'")

    def run() -> dict:
        done = subprocess.run(
            [sys.executable, __file__], capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout)

    return once_per_run(request, run)


def main() -> None:
    os.environ["DAGGER_MAIN_OBJECT"] = "RankgateCi"
    os.environ["DAGGER_MODULE"] = "rankgate-ci"
    sys.path.insert(0, str(ROOT / "ci" / "src"))
    import dagger
    from dagger.client.base import Type
    from dagger.mod import default_module

    async def lazy_id(self):
        return self

    dagger.Module.id = lazy_id
    import rankgate_ci  # noqa: F401  (registers the object type)

    def calls(obj: Type) -> list[tuple[str, dict]]:
        return [(f.name, f.args) for f in obj._ctx.selections]

    def type_name(typedef: Type) -> str:
        for name, args in calls(typedef):
            if name == "withObject":
                return args["name"]
            if name == "withKind":
                return str(getattr(args["kind"], "name", args["kind"]))
        return "?"

    def describe(function: Type) -> dict:
        out: dict = {"args": {}, "cache": None, "description": ""}
        for name, args in calls(function):
            if name == "function":
                out["name"], out["returns"] = args["name"], type_name(args["returnType"])
            elif name == "withDescription":
                out["description"] = args["description"]
            elif name == "withCachePolicy":
                out["cache"] = str(getattr(args["policy"], "name", args["policy"]))
            elif name == "withArg":
                typedef = args["typeDef"]
                out["args"][args["name"]] = {
                    "type": type_name(typedef),
                    "optional": any(n == "withOptional" for n, _ in calls(typedef)),
                    "default": args.get("defaultValue"),
                    "default_path": args.get("defaultPath"),
                    "ignore": args.get("ignore"),
                    "description": args.get("description"),
                }
        return out

    module = asyncio.run(default_module()._typedefs())
    result: dict = {"functions": {}, "constructor": None}
    for name, args in calls(module):
        if name != "withObject":
            continue
        for part, part_args in calls(args["object"]):
            if part == "withFunction":
                fn = describe(part_args["function"])
                result["functions"][fn.pop("name")] = fn
            elif part == "withConstructor":
                result["constructor"] = describe(part_args["function"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
