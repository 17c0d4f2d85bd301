"""The package installs from a wheel built in a scratch folder and runs there."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _packages() -> list[str]:
    """The packages the wheel must carry, read from pyproject.toml (its list and its mapped folders),
    not a copy: kvproof.findings and any folder mapped later are imported too."""
    import tomllib
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {k for k in tool["package-dir"] if k}
    listed = set(tool["packages"])
    assert mapped <= listed, f"mapped in package-dir but not in packages: {sorted(mapped - listed)}"
    return sorted(listed)


def test_the_package_list_is_read_from_pyproject():
    packages = _packages()
    assert {"kvproof", "kvproof.spec", "kvproof.verify", "kvproof.fuzz", "kvproof.findings"} <= set(packages)
    on_disk = {".".join(p.relative_to(ROOT / "src").parent.parts) for p in (ROOT / "src").rglob("__init__.py")}
    assert on_disk <= set(packages), f"packages under src/ that pyproject does not list: {sorted(on_disk - set(packages))}"


def test_wheel_installs_and_runs_outside_the_checkout(tmp_path):
    # Build from a scratch copy: setuptools writes build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "out", "build", "*.egg-info",
                                                             "__pycache__", ".hypothesis", ".pytest_cache"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(src)], check=True, cwd=tmp_path)
    (wheel,) = wheels.glob("kvproof-*.whl")
    target = tmp_path / "venv"
    venv.create(target, with_pip=False, system_site_packages=False)
    py = target / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, str(wheel)],
                   check=True)
    work = tmp_path / "work"
    work.mkdir()
    packages = _packages()
    probe = ("import importlib; [importlib.import_module(p) for p in " + repr(packages) + "];"
             "import kvproof, kvproof.facts, kvproof.fuzz.run, kvproof.fuzz.libfuzzer as r, kvproof.verify, kvproof.bridge.client as c;"
             "from pathlib import Path; root = c.package_root();"
             "assert (root / 'kvproof' / 'spec' / 'model.py').exists() and (root / 'kvproof' / 'facts' / '__init__.py').exists(), root;"
             "import kvproof.spec as sp; assert not {'strategies.py', 'model_ch_test.py'} & {p.name for p in Path(sp.__file__).parent.iterdir()}, 'dev-only modules in the wheel';"
             "assert r.SEEDS.is_dir() and r.DICT.exists(), r.SEEDS;"
             "import kvproof.findings.fix as f, kvproof.findings.reproducers as rp, kvproof.findings.ledger as lg;"
             "assert f.diff_path('f2216f93e1a4') is not None, f.FIXES;"
             "assert (rp.TEMPLATES / 'test_consumer.py.in').exists(), rp.TEMPLATES;"
             "assert lg.Ledger.load().entries(), 'no ledger in the wheel';"
             "print(kvproof.__file__)")
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=work,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert str(target) in out.stdout and str(ROOT) not in out.stdout
    cli = subprocess.run([str(py), "-m", "kvproof", "check", "--groups", "mamba:0"], capture_output=True, text=True,
                         cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert cli.returncode == 2 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert not list(work.iterdir())  # nothing written into the working directory
