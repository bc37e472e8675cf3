"""Building a standalone library (``sol.deploy``) with a `DeployTarget`'s toolchain, and checking the result.

One translation unit is compiled with ``-fvisibility=hidden``; the API is
marked ``visibility("default")`` in the source. A shared library is linked
with a version script that keeps only the API global (objects of a compute
library's glue may carry default-visibility C++ template instances) and with
``--as-needed``, so its DT_NEEDED entries are exactly the run-time libraries
it uses. A static library's objects are first linked into one relocatable
object, whose every global but the API is then made local
(``objcopy --keep-global-symbols``, after weakening the STB_GNU_UNIQUE
symbols g++ gives the static locals of inline functions, which objcopy
would leave global), so only the API can clash with the application. Both
are checked with ``nm``: a library that exports anything but the API is an
error, not a warning. For a static library the libraries
to link are derived from its undefined symbols and proved by linking a
small C program against it.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import log
from ..errors import SolBuildError
from ..records import DeployLibraries, DeployTarget
from .build import failed_builds_dir

_log = log.get("deploy")

#: flags of every object: hidden by default (the API opts in), position independent (a static
#: library may end up in a shared object or a PIE), no C++ runtime (exceptions, RTTI) the C API cannot use
OBJECT_FLAGS = ("-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden", "-fno-exceptions", "-fno-rtti",
                "-fno-math-errno", "-std=c++17")

#: undefined-symbol patterns -> the library that defines them, in link order (libgomp before what it needs)
_LIBRARY_OF_SYMBOL: tuple[tuple[str, str], ...] = (
    (r"^(GOMP_|omp_)", "-lgomp"),
    (r"^__kmpc_", "-lomp"),  # LLVM's OpenMP runtime (objects built by clang, e.g. for the VE)
    (r"^(_Z|__cxa_|__gxx_)", "-lstdc++"),
    (r"^(exp|expm1|log|log1p|sqrt|tanh|erf|erfc|pow|floor|ceil|trunc|fmod|round|nearbyint|sin|cos|tan|atan|atan2|"
     r"sinh|cosh|asin|acos|asinh|acosh|atanh|cbrt|hypot|exp2|log2|log10|fmax|fmin|lgamma|tgamma|__.*_finite)f?$", "-lm"),
    (r"^pthread_", "-lpthread"),
    (r"^(dladdr|dlopen|dlsym|dlclose|dlerror)$", "-ldl"),
)


@dataclass(frozen=True)
class BuiltLibrary:
    path: Path
    #: the global symbols the library defines (checked to be exactly the API)
    symbols: tuple[str, ...]
    #: shared: the DT_NEEDED entries; static: the libraries its undefined symbols come from
    runtime_libraries: tuple[str, ...]
    #: what an application's link line needs besides the library itself
    link_flags: tuple[str, ...]
    #: the compiler flags of the library's code (for the header and the report)
    compile_flags: tuple[str, ...]
    #: shared libraries copied beside the library (ship them with it)
    shipped: tuple[Path, ...] = ()


def require_tools(target: DeployTarget) -> None:
    """Raise naming the package to install when the target's compiler or binutils are missing."""
    tools = (target.compiler()[0], *(target.tool(name) for name in ("ar", "nm", "objcopy", "readelf")))
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise SolBuildError(f"sol.deploy for {target.device_type} needs {', '.join(missing)}, which is not installed "
                            f"(not on PATH): {target.install_hint}")


def compile_flags(target: DeployTarget, options: Mapping[str, str]) -> list[str]:
    return [*target.flags(), *target.option_flags(options)]


def build_library(target: DeployTarget, options: Mapping[str, str], source: Path, library: Path, kind: str,
                  api: Sequence[str], name: str, extras: DeployLibraries | None = None) -> BuiltLibrary:
    """Compile ``source`` (plus ``extras``) into ``library`` ("shared" or "static"); verify it exports exactly ``api``.

    ``extras.shipped`` shared libraries are copied beside ``library`` under their sonames.
    """
    require_tools(target)
    extras = extras or DeployLibraries()
    flags = compile_flags(target, options)
    cxx, work, out = target.compiler(), source.parent, library.parent
    obj = work / (library.stem + ".o")
    includes = [f"-I{d}" for d in extras.include_dirs]
    _run([*cxx, *flags, *OBJECT_FLAGS, *includes, "-c", str(source), "-o", str(obj)], source, name)
    library.unlink(missing_ok=True)
    shipped = [ship(target, lib, out) for lib in extras.shipped]
    shipped_link = [f"-L{out}", *(f"-l:{soname}" for soname in shipped)] if shipped else []
    if kind == "shared":
        # The version script is the second lock after -fvisibility=hidden: objects of a compute library's glue
        # may carry default-visibility template instances from C++ headers.
        script = work / "api.map"
        script.write_text("{ global: " + "; ".join(api) + "; local: *; };\n")
        _run([*cxx, *flags, "-shared", str(obj), *map(str, extras.objects), *shipped_link, "-o", str(library),
              "-Wl,--as-needed", f"-Wl,-soname,{library.name}", "-Wl,-z,noexecstack", f"-Wl,--version-script={script}",
              *(["-Wl,-rpath,$ORIGIN"] if shipped else [])], source, name)
        symbols = _defined_symbols(target, library, dynamic=True)
        needed = _needed(target, library)
        link = (f"-L{out}", f"-l{_link_name(library)}", f"-Wl,-rpath,{out}")
    else:
        combined = obj
        if extras.objects:  # one relocatable object, so that hidden cross-object references survive localising
            combined = work / (library.stem + ".combined.o")
            _run([*cxx, "-r", "-nostdlib", str(obj), *map(str, extras.objects), "-o", str(combined)], source, name)
        # objcopy localises GLOBAL and WEAK symbols but leaves STB_GNU_UNIQUE ones as they are: g++ emits the static
        # locals of inline functions from C++ headers (and their guard variables) as such, so weaken those first
        unique = _unique_symbols(target, combined)
        if unique:
            weaken = work / "unique.txt"
            weaken.write_text("\n".join(unique) + "\n")
            _run([target.tool("objcopy"), f"--weaken-symbols={weaken}", str(combined)], source, name)
        keep = work / "api.txt"
        keep.write_text("\n".join(api) + "\n")
        _run([target.tool("objcopy"), f"--keep-global-symbols={keep}", str(combined)], source, name)
        _run([target.tool("ar"), "rcs", str(library), str(combined)], source, name)
        symbols = _defined_symbols(target, library, dynamic=False)
        system = libraries_for(_undefined_symbols(target, library))
        link = (str(library), *shipped_link, *([f"-Wl,-rpath,{out}"] if shipped else []), *system)
        needed = (*shipped, *("lib" + flag[2:] for flag in system))
    extra = sorted(set(symbols) - set(api))
    if extra or set(api) - set(symbols):
        raise SolBuildError(f"the deployed library {library} exports {', '.join(extra[:20]) or 'nothing extra'} and "
                            f"lacks {', '.join(sorted(set(api) - set(symbols))) or 'nothing'}; expected exactly "
                            f"{', '.join(api)} (a visibility bug in the generated code; please report it)")
    return BuiltLibrary(library, tuple(sorted(symbols)), tuple(needed), tuple(link), tuple(flags),
                        tuple(out / soname for soname in shipped))


def ship(target: DeployTarget, shared_library: Path, directory: Path) -> str:
    """Copy ``shared_library`` into ``directory`` under its soname (what the loader looks for); returns the soname."""
    rows = _output([target.tool("readelf"), "-d", str(shared_library)])
    soname = next((m.group(1) for row in rows if (m := re.search(r"\(SONAME\).*\[(.+)\]", row))),
                  shared_library.name)
    destination = directory / soname
    if destination.resolve() != shared_library.resolve():
        shutil.copy2(shared_library.resolve(), destination)
    return soname


def libraries_for(undefined: Iterable[str]) -> list[str]:
    """The ``-l`` flags that define ``undefined`` symbols (libc's own need no flag), in link order."""
    undefined = list(undefined)
    wanted = {flag for symbol in undefined for pattern, flag in _LIBRARY_OF_SYMBOL if re.match(pattern, symbol)}
    # omp_* is the API of either OpenMP runtime: LLVM's libomp where the objects call it (__kmpc_*), else libgomp
    if "-lomp" in wanted and not any(symbol.startswith("GOMP_") for symbol in undefined):
        wanted.discard("-lgomp")
    return [flag for _, flag in _LIBRARY_OF_SYMBOL if flag in wanted]


def check_link(target: DeployTarget, header: Path, built: BuiltLibrary, func: str) -> bool:
    """Prove ``built.link_flags`` suffice: link a C program that references the API (False: no C compiler)."""
    cc = c_compiler(target)
    if cc is None:
        _log.info("no C compiler beside %s; the link flags of %s are not checked", target.compiler()[0], built.path)
        return False
    with tempfile.TemporaryDirectory(prefix="sol-deploy-link-") as tmp:
        program = Path(tmp) / "link_check.c"
        program.write_text(f'#include "{header.name}"\n'
                           f"int main(void) {{ void (*volatile init)(int) = {func}_init; "
                           f"int (*volatile seed)(int) = {func}_seed; void* volatile run = (void*){func}; "
                           "return !init || !seed || !run; }\n")
        _run([*cc, f"-I{header.parent}", str(program), *built.link_flags, "-o", str(Path(tmp) / "link_check")],
             program, f"link check of {built.path.name}")
    return True


def c_compiler(target: DeployTarget) -> list[str] | None:
    """The C driver next to the target's C++ compiler (g++ -> gcc), to link C programs against the library."""
    head, *rest = target.compiler()
    for cxx, cc in (("g++", "gcc"), ("clang++", "clang"), ("c++", "cc")):
        if head.endswith(cxx):
            candidate = head[: -len(cxx)] + cc
            if shutil.which(candidate):
                return [candidate, *rest]
    return None


def _link_name(library: Path) -> str:
    stem = library.name.split(".so")[0]
    return stem[3:] if stem.startswith("lib") else f":{library.name}"


def _defined_symbols(target: DeployTarget, library: Path, dynamic: bool) -> list[str]:
    argv = [target.tool("nm"), "-P", "--defined-only", "-g"] + (["-D"] if dynamic else []) + [str(library)]
    return sorted({line.split()[0] for line in _output(argv) if line and not line.endswith(":")
                   and len(line.split()) >= 2})


def _unique_symbols(target: DeployTarget, obj: Path) -> list[str]:
    """The STB_GNU_UNIQUE symbols ``obj`` defines (``nm`` type ``u``), e.g. static locals of inline functions."""
    rows = _output([target.tool("nm"), "-P", "--defined-only", str(obj)])
    return sorted({row.split()[0] for row in rows if len(row.split()) >= 2 and row.split()[1] == "u"})


def _undefined_symbols(target: DeployTarget, library: Path) -> list[str]:
    rows = _output([target.tool("nm"), "-P", "-u", str(library)])
    return sorted({row.split()[0].split("@")[0] for row in rows if row and not row.endswith(":")})


def _needed(target: DeployTarget, library: Path) -> tuple[str, ...]:
    rows = _output([target.tool("readelf"), "-d", str(library)])
    return tuple(m.group(1) for row in rows if (m := re.search(r"\(NEEDED\).*\[(.+)\]", row)))


def _output(argv: list[str]) -> list[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SolBuildError(f"{shlex.join(argv)} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.splitlines()


def _run(argv: list[str], source: Path, name: str) -> None:
    _log.debug("$ %s", shlex.join(argv))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=source.parent)
        output, code = done.stdout + done.stderr, done.returncode
    except OSError as exc:
        output, code = f"cannot run {argv[0]!r}: {exc}", -1
    if code == 0:
        return
    root = failed_builds_dir()
    root.mkdir(parents=True, exist_ok=True)
    kept = Path(tempfile.mkdtemp(prefix=f"deploy-{name}-", dir=root))
    shutil.copy2(source, kept / source.name)
    (kept / "build.log").write_text("$ " + shlex.join(argv) + "\n" + output)
    tail = "\n".join(output.strip().splitlines()[-30:]) or "(no output)"
    raise SolBuildError(f"building the deployed library {name!r} failed (exit code {code}). Source kept at "
                        f"{kept / source.name}; build log at {kept / 'build.log'}.\n{tail}")
