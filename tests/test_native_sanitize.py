"""Memory safety of the C helper: a warning-free compile, and fuzzing under ASan + UBSan.

The fuzz target (fuzz/fuzz_scan.c) runs through fuzz/driver.c, which any C compiler builds,
so CI (gcc) runs it under -fsanitize=address,undefined. A short campaign runs in the normal
suite; JOURNAL_CAMPAIGN=1 runs a long one (JOURNAL_FUZZ_SECONDS, default 300). When clang
with libFuzzer is installed, the same target also runs under libFuzzer. Each run asserts how
many inputs it executed.

Without a sanitizer runtime or clang these tests skip on a developer's machine; CI installs
them (.ci/run) and sets JOURNAL_REQUIRE_SANITIZERS=1, which turns every such skip into a
failure, so the fuzzing cannot quietly stop running there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NoReturn

import pytest

from tests.conftest import report_count

ROOT = Path(__file__).resolve().parents[1]
NATIVE = ROOT / "native"
FUZZ = ROOT / "fuzz"
C_SOURCE = NATIVE / "journal_native.c"
CAMPAIGN = os.environ.get("JOURNAL_CAMPAIGN") == "1"
CAMPAIGN_SECONDS = float(os.environ.get("JOURNAL_FUZZ_SECONDS", "300"))
SHORT_INPUTS = 60_000  # about five seconds under the sanitizers on one core
LIBFUZZER_SECONDS = 8
LIBFUZZER_INPUTS_MIN = 10_000  # libFuzzer runs tens of thousands a second here: far fewer is a broken run
OPTIONAL_ENV = "JOURNAL_NATIVE_OPTIONAL"
REQUIRE_ENV = "JOURNAL_REQUIRE_SANITIZERS"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


def _compiler() -> str:
    for cc in (os.environ.get("CC"), "gcc", "cc", "clang"):
        if cc and shutil.which(cc):
            return cc
    if os.environ.get(OPTIONAL_ENV) == "1":
        pytest.skip(f"no C compiler on PATH and {OPTIONAL_ENV}=1")
    pytest.fail(f"no C compiler on PATH (gcc, cc or clang); set {OPTIONAL_ENV}=1 if that is expected")


def _missing(reason: str) -> NoReturn:
    """Skip for lack of a tool, or fail where the tools are required (CI)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires it (.ci/run installs clang and the sanitizer runtimes)")
    pytest.skip(reason)


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]


@pytest.mark.parametrize("std", ["c99", "c11"])
def test_c_sources_compile_without_warnings(tmp_path: Path, std: str) -> None:
    cc = _compiler()
    python_h = sysconfig.get_paths()["include"]  # zstd_held.c, json_floats.c, write_sync.c: CPython extensions
    sources = ("zstd_held.c", "json_floats.c", "write_sync.c")
    for src in (C_SOURCE, *(NATIVE / s for s in sources), FUZZ / "fuzz_scan.c", FUZZ / "driver.c"):
        cmd = [cc, f"-std={std}", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{NATIVE}", f"-I{python_h}"]
        res = _run([*cmd, "-c", str(src), "-o", str(tmp_path / (src.stem + ".o"))])
        assert res.returncode == 0, f"{src.name} ({std}):\n{res.stderr}"


@pytest.fixture(scope="module")
def sanitized_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = _compiler()
    out = tmp_path_factory.mktemp("sanitize")
    # A canary: the sanitizer runtime must be there and must catch a heap overflow, or a
    # clean campaign below would prove nothing.
    canary = out / "canary.c"
    canary.write_text(
        "#include <stdlib.h>\n"
        "int main(int argc, char **argv) { (void)argv; char *p = malloc(4);"
        " int v = p[argc + 3]; free(p); return v == 1234; }\n"
    )
    res = _run([cc, *SANITIZE, "-g", str(canary), "-o", str(out / "canary")])
    if res.returncode != 0:
        _missing(f"{cc} cannot build with -fsanitize=address,undefined: {res.stderr.strip()[:300]}")
    res = _run([str(out / "canary")], env={**os.environ, **SANITIZER_ENV})
    if "AddressSanitizer" not in res.stderr:
        _missing(f"the sanitizer runtime does not work here (canary exit {res.returncode}): {res.stderr[:300]}")
    driver = out / "driver"
    sources = [str(FUZZ / "fuzz_scan.c"), str(FUZZ / "driver.c"), str(C_SOURCE)]
    res = _run(
        [
            cc,
            "-std=c99",
            "-g",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            *SANITIZE,
            f"-I{NATIVE}",
            *sources,
            "-o",
            str(driver),
        ]
    )
    assert res.returncode == 0, res.stderr
    return driver


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("corpus")
    res = _run([sys.executable, str(FUZZ / "make_corpus.py"), str(out)])
    assert res.returncode == 0, res.stderr
    files = sorted(str(p) for p in out.iterdir())
    assert len(files) >= 10
    return files


def _inputs_ran(stdout: str) -> int:
    m = re.search(r"inputs: (\d+)", stdout)
    assert m, stdout
    return int(m.group(1))


def test_fuzz_scanner_under_asan_and_ubsan(sanitized_driver: Path, corpus: list[str]) -> None:
    budget = ["-t", str(CAMPAIGN_SECONDS)] if CAMPAIGN else ["-n", str(SHORT_INPUTS)]
    res = _run([str(sanitized_driver), *budget, "-s", "20261129", *corpus], env={**os.environ, **SANITIZER_ENV})
    assert res.returncode == 0, f"sanitizer or contract failure (exit {res.returncode}):\n{res.stderr[-4000:]}"
    assert "runtime error" not in res.stderr and "Sanitizer" not in res.stderr, res.stderr[-4000:]
    ran = _inputs_ran(res.stdout)
    assert ran >= (len(corpus) + SHORT_INPUTS if not CAMPAIGN else 1)
    report_count("fuzz inputs under ASan+UBSan (gcc driver)", ran)


def test_fuzz_scanner_under_libfuzzer(tmp_path: Path, corpus: list[str]) -> None:
    clang = shutil.which("clang")
    if clang is None:
        _missing("clang not installed (apt-get install clang libclang-rt-dev); the gcc driver covers the sanitizers")
    exe = tmp_path / "fuzz_scan"
    sources = [str(FUZZ / "fuzz_scan.c"), str(C_SOURCE)]
    res = _run([clang, "-g", "-O1", "-fsanitize=fuzzer,address,undefined", f"-I{NATIVE}", *sources, "-o", str(exe)])
    if res.returncode != 0:
        _missing(f"clang cannot build libFuzzer targets here (libclang-rt-dev?): {res.stderr.strip()[:300]}")
    work = tmp_path / "corpus"
    work.mkdir()
    for f in corpus:
        shutil.copy(f, work)
    seconds = int(CAMPAIGN_SECONDS) if CAMPAIGN else LIBFUZZER_SECONDS
    res = _run(
        [str(exe), f"-max_total_time={seconds}", "-seed=20261129", "-print_final_stats=1", str(work)],
        env={**os.environ, **SANITIZER_ENV},
    )
    assert res.returncode == 0, res.stderr[-4000:]
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", res.stderr)
    assert m, f"libFuzzer printed no final stats:\n{res.stderr[-2000:]}"
    ran = int(m.group(1))
    assert ran >= LIBFUZZER_INPUTS_MIN * (seconds / LIBFUZZER_SECONDS if CAMPAIGN else 1), ran
    report_count(f"fuzz inputs under libFuzzer+ASan+UBSan (clang, {seconds} s)", ran)
