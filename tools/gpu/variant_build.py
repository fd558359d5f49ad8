#!/usr/bin/env python3
"""Build a patched variant of the two executables next to a finished build,
recompiling only what the patch touches, so that several variants build at
once (tools/gpu/gpu_gdn_variants.sh starts one of these per patch).

  tools/gpu/variant_build.py BUILD PATCH OUT

BUILD is a configured and built CMake/Ninja build directory of this tree;
PATCH a `git diff` of the tree (patch -p1); OUT a new directory. The tree
is copied to OUT (build directories and .git left out) and patched there;
every object whose recorded dependencies (ninja -t deps) include a patched
file is compiled again with BUILD's own command, the copy's paths put in
place of the tree's; the static libraries holding such objects are copied
with those members replaced (ar r); then OUT/bitrank and OUT/bitrank_tests
are linked with BUILD's link commands. BUILD itself is only read. A patch
that changes the build (CMake files) or adds or removes files is refused:
build that one the slow way (patch the tree, cmake --build).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

EXECUTABLES = ("bitrank", "bitrank_tests")
SOURCE_DIRS = ("src", "include", "tests", "bench")


def ninja(build, *args):
    return subprocess.run(["ninja", "-C", build, "-t", *args], capture_output=True, text=True, check=True).stdout


def final_command(build, target):
    lines = [l for l in ninja(build, "commands", "-s", target).splitlines() if l.strip()]
    if not lines:
        sys.exit(f"variant_build: ninja knows no command for {target}")
    return lines[-1]


def patched_paths(patch):
    """The files a `git diff` changes (from its `diff --git a/X b/X` lines)."""
    paths = set()
    for line in open(patch, errors="replace"):
        if line.startswith(("new file mode", "deleted file mode", "rename from", "copy from")):
            sys.exit("variant_build: the patch adds, removes or renames a file; build this variant the slow way")
        m = re.match(r"diff --git a/(\S+) b/(\S+)", line)
        if m:
            paths.add(m.group(2))
    if not paths:
        sys.exit("variant_build: no `diff --git` header in the patch (a git diff is expected)")
    if any(p.endswith(("CMakeLists.txt", ".cmake")) for p in paths):
        sys.exit("variant_build: the patch changes the build; build this variant the slow way")
    return paths


def dependencies(build):
    """Object → its recorded dependencies (absolute paths)."""
    deps, target = {}, None
    for line in ninja(build, "deps").splitlines():
        if line and not line[0].isspace():
            target = line.split(":")[0]
            deps[target] = []
        elif line.strip() and target is not None:
            deps[target].append(os.path.normpath(os.path.join(build, line.strip())))
    return deps


def run(cmd, cwd):
    subprocess.run(cmd, shell=True, cwd=cwd, check=True)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    build, patch, out = (os.path.abspath(a) for a in sys.argv[1:])
    tree = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    changed = patched_paths(patch)
    if os.path.exists(out):
        shutil.rmtree(out)
    def ignore(where, names):  # at the top only: the build directories, .git, the variants, the anchors
        if os.path.abspath(where) != tree:
            return []
        return [n for n in names if n in (".git", "variants", ".anchors") or n.startswith("build")]

    shutil.copytree(tree, out, ignore=ignore, symlinks=True)
    run(f"patch -p1 -s < {shlex.quote(patch)}", out)
    touched = {os.path.join(tree, p) for p in changed}
    objects = sorted(t for t, d in dependencies(build).items() if t.endswith(".o") and touched & set(d))
    os.makedirs(os.path.join(out, "obj"), exist_ok=True)
    fresh = {}  # object (as BUILD names it) → its variant
    for obj in objects:
        cmd = final_command(build, obj)
        cmd = re.sub(r"^(ccache\s+)", "", cmd)
        for d in SOURCE_DIRS:
            cmd = cmd.replace(f"{tree}/{d}/", f"{out}/{d}/").replace(f"-I{tree}/{d} ", f"-I{out}/{d} ")
        where = os.path.join(out, "obj", os.path.dirname(obj))
        os.makedirs(where, exist_ok=True)
        target = os.path.join(where, os.path.basename(obj))
        cmd = cmd.replace(f"-MF {obj}.d", f"-MF {target}.d").replace(f"-o {obj}", f"-o {target}")
        if target not in cmd:
            sys.exit(f"variant_build: could not move {obj}'s output in: {cmd}")
        run(cmd, build)
        fresh[obj] = target
    libraries = {}
    for exe in EXECUTABLES:
        for token in shlex.split(final_command(build, exe)):
            if token.endswith(".a") and not os.path.isabs(token) and token not in libraries:
                members = shlex.split(final_command(build, token))
                mine = [fresh[m] for m in members if m in fresh]
                if mine:
                    names = [os.path.basename(m) for m in members if m.endswith(".o")]
                    clash = [os.path.basename(m) for m in mine if names.count(os.path.basename(m)) > 1]
                    if clash:
                        sys.exit(f"variant_build: {token} holds several members named {clash[0]}")
                    shutil.copy2(os.path.join(build, token), os.path.join(out, token))
                    run(f"ar r {shlex.quote(os.path.join(out, token))} " + " ".join(map(shlex.quote, mine)), build)
                    libraries[token] = os.path.join(out, token)
    for exe in EXECUTABLES:
        tokens = shlex.split(final_command(build, exe))
        tokens = [fresh.get(t, libraries.get(t, t)) for t in tokens]
        at = tokens.index("-o")
        if tokens[at + 1] != exe:
            sys.exit(f"variant_build: unexpected link command for {exe}")
        tokens[at + 1] = os.path.join(out, exe)
        run(" ".join(t if t in (":", "&&") else shlex.quote(t) for t in tokens), build)
    print(f"variant_build: {os.path.basename(patch)}: {len(objects)} object(s) recompiled, "
          f"{len(libraries)} librar{'y' if len(libraries) == 1 else 'ies'} patched, {len(EXECUTABLES)} executables linked")


if __name__ == "__main__":
    main()
