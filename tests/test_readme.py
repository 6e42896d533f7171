"""The README's first lines are the two commands a newcomer runs; CI runs the second."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("```bash") + 1
    return [line.split("#")[0].strip() for line in lines[start:start + 2]]


def test_readme_opens_with_install_and_run_then_install_and_test():
    run, test = readme_commands()
    assert run.startswith("pip install -e .") and "workbench serve" in run
    assert test.startswith("pip install -e \".[test]\"") and "pytest" in test


def test_ci_runs_the_readme_test_command_verbatim():
    _, test = readme_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in [line.strip() for line in ci]
