"""`workbench scenarios`: the papers' own settings `simulate --scenario` and `bench paper`
run (see `workbench.scenarios`)."""

from __future__ import annotations

from ..output import emit


def _list(args) -> int:
    from ..scenarios import all_scenarios

    rows = [{"scenario": s.name, "engine": s.engine, "baselines": ", ".join(s.baselines),
             "claims": len(s.claims), "paper": s.paper, "about": s.title}
            for s in all_scenarios().values()]
    emit({"scenarios": rows}, as_json=args.json, tables={"scenarios": rows})
    return 0


def register(sub) -> None:
    p = sub.add_parser("scenarios", help="list the papers' settings (simulate --scenario NAME)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=_list)
