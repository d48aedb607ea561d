#!/usr/bin/env python3
"""Checks tprof's dependency order from the `#include "..."` lines of src/ and include/.

usage: check_layers.py [REPO_ROOT]      check (default root: the parent of scripts/); exit 1 on violations, 2 on misuse
       check_layers.py --list [ROOT]    also print each layer's files and its includes per target layer
       check_layers.py --self-test      run the checker on a small synthetic tree; exit 0 when it behaves

Rules (one output line per violation):
1. Every src/ file (*.c *.h *.cu *.cuh) belongs to the layer of its first folder under src/; include/ is core.
   A folder missing from LAYERS is a violation.
2. A quoted include resolves like the compiler's: the file's own folder, then src/, then include/. One that
   resolves to nothing is a violation unless named in ALLOWED_UNRESOLVED (generated headers). <...> includes and
   includes inside comments are ignored.
3. No include runs back up: rank(included) <= rank(including).
4. Folders in SIDE_BY_SIDE must not include each other; inside a folder of SUB_RANKS, its sub-folders keep
   their own order (equal ranks are siblings and may include each other).
5. No cycles among files: every elementary cycle of the file include graph is reported once.
6. tests/, bench/, tools/ are not checked, but src/ and include/ must not include anything outside src/, include/.
7. No file in a folder of SAME_IN_EVERY_BUILD has a preprocessor conditional (#if, #ifdef, #ifndef, #elif...) naming
   CUDA or NVCC (TPROF_HAVE_CUDA, __CUDACC__, CUDART_VERSION, __NVCC__...), comments ignored: such a folder
   compiles the same with and without CUDA and reaches the GPU through src/exec/executor.h.
"""
import collections
import os
import re
import sys
import tempfile

# Layers: the first folder under src/ -> rank. A file may include only files of its own rank or lower.
LAYERS = {
    "core": 0,      # error codes, checks, utilities, rng; include/tprof.h (the public API) also counts as core
    "formats": 1,   # dtypes and quantization formats (fp8, mxfp, nvfp4 encoding)
    "ir": 2,        # the graph: values, ops, shapes
    "io": 3,        # files in and out: safetensors, images
    "models": 4,    # model definitions built on the ir (ViT)
    "planner": 5,   # device caps, policy, the execution plan
    "exec": 6,      # executors: exec/cpu (reference) and exec/cuda (kernels, engine)
    "profile": 7,   # traces (CUPTI, NVTX), analysis, roofline
    "bench": 8,     # benchmark driver and statistics (src/bench, not the bench/ labs)
    "report": 9,    # documents and comparisons of results
    "lint": 10,     # checks of models, plans and inputs
    "cli": 11,      # the command line program
}
INCLUDE_DIR_LAYER = "core"  # layer of every file under include/

# Folders that sit side by side and must not include each other.
SIDE_BY_SIDE = [("src/exec/cpu", "src/exec/cuda")]

# Inside these folders, sub-folders have their own order ("" = files directly in the folder).
SUB_RANKS = {
    "src/exec/cuda": {
        "ptx": 0,                                # inline PTX wrappers (wgmma, mma, ldmatrix)
        "kernels": 1,                            # shared kernels: elementwise, gelu, patch embed, scale layouts
        "gemm": 2, "attention": 2, "vendor": 2,  # siblings: GEMM paths, attention kernels, cuBLASLt/cuDNN wrappers
        "persistent": 2,                         # the persistent decode kernel (a sibling of the kernels it fuses)
        "engine": 3, "": 3,                      # the engine, and any file directly in src/exec/cuda
    },
}

# Folders compiled the same with and without CUDA (rule 7): the bench runs on the executors of src/exec/executor.h,
# declared in every build (a build without CUDA links src/exec/cuda_absent.c, whose functions refuse).
SAME_IN_EVERY_BUILD = ("src/bench",)

ALLOWED_UNRESOLVED = {"tp_build_info.h", "onnx/onnx.pb-c.h"}  # generated into the build folder by CMake (the
# second by protoc-c from the ONNX schema, src/io/onnx.c)
SOURCE_EXTS = (".c", ".h", ".cu", ".cuh")
CHECKED_DIRS = ("src", "include")
MAX_CYCLES = 200

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)
CUDA_CONDITIONAL_RE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b(?:\\\n|[^\n])*?"
                                 r"\b(\w*(?:CUDA|NVCC)\w*)", re.M)
TOKEN_RE = re.compile(r"/\*.*?(?:\*/|\Z)|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?", re.S)


def strip_comments(text):
    """Blank out /* */ and // comments (newlines kept, so line numbers hold); string and char literals are kept
    whole (so a "//" inside one is no comment) and end at their closing quote or at the end of the line."""
    return TOKEN_RE.sub(lambda m: m[0] if m[0][0] in "\"'" else " " + "\n" * m[0].count("\n"), text)


def quoted_includes(path):
    """[(line number, name)] of the quoted includes of a file, comments ignored."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in INCLUDE_RE.finditer(text)]


def cuda_conditionals(path):
    """[(line number, name)] of the preprocessor conditionals of a file that name CUDA or NVCC, comments ignored
    (a conditional continued over lines counts at its first)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_comments(f.read())
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in CUDA_CONDITIONAL_RE.finditer(text)]


def layer_of(rel):
    """(layer, None) or (None, problem) for a repo-relative path under src/ or include/."""
    parts = rel.split("/")
    if parts[0] == "include":
        return INCLUDE_DIR_LAYER, None
    if len(parts) < 3:
        return None, "file directly under src/ has no layer"
    if parts[1] not in LAYERS:
        return None, f"folder '{parts[1]}' has no layer in the table"
    return parts[1], None


def sub_rank(rel):
    """(folder, sub-folder, rank) when rel lies in a SUB_RANKS folder, else None (rank None: not in table)."""
    for folder, table in SUB_RANKS.items():
        if rel.startswith(folder + "/"):
            rest = rel[len(folder) + 1:].split("/")
            sub = rest[0] if len(rest) > 1 else ""
            return folder, sub, table.get(sub)
    return None


def side_group(rel):
    return next(((g, f) for g in SIDE_BY_SIDE for f in g if rel.startswith(f + "/")), (None, None))


def resolve(root, rel, name):
    """Repo-relative path the include resolves to, or None."""
    for base in (os.path.dirname(rel), "src", "include"):
        cand = os.path.normpath(os.path.join(root, base, name))
        if os.path.isfile(cand):
            return os.path.relpath(cand, root).replace(os.sep, "/")
    return None


def source_files(root):
    files = []
    for top in CHECKED_DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, top)):
            dirnames.sort()
            files += [os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, "/")
                      for n in sorted(names) if n.endswith(SOURCE_EXTS)]
    return files


def find_cycles(graph):
    """Every elementary cycle once, each started at its smallest file (a path search per start node s over
    nodes > s that can still reach s)."""
    rev = {}
    for a, bs in graph.items():
        for b in bs:
            rev.setdefault(b, set()).add(a)
    cycles = []
    for s in sorted(graph):
        back, stack = {s}, [s]
        while stack:
            for p in rev.get(stack.pop(), ()):
                if p > s and p not in back:
                    back.add(p)
                    stack.append(p)
        path, stack = [s], [iter(sorted(graph[s]))]
        while stack and len(cycles) < MAX_CYCLES:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                path.pop()
            elif nxt == s:
                cycles.append(path + [s])
            elif nxt in back and nxt not in path:
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return cycles


def check(root):
    """Returns (violations, files, number of includes, edges {file: [(line, target or marker)]})."""
    files = source_files(root)
    problems, edges, graph, n_inc = [], {}, {f: set() for f in files}, 0
    for rel in files:
        layer, why = layer_of(rel)
        if why:
            problems.append((rel, 0, f"{rel}: {why}"))
        sub = sub_rank(rel)
        if sub and sub[2] is None:
            problems.append((rel, 0, f"{rel}: folder '{sub[0]}/{sub[1]}' has no rank in SUB_RANKS"))
        group, mine = side_group(rel)
        edges[rel] = []
        same = next((f for f in SAME_IN_EVERY_BUILD if rel.startswith(f + "/")), None)
        for line, name in cuda_conditionals(os.path.join(root, rel)) if same else ():
            problems.append((rel, line, f"{rel}:{line}: a preprocessor conditional on {name}: {same}/ compiles "
                                        "the same with and without CUDA (its GPU calls go through "
                                        "src/exec/executor.h)"))
        for line, name in quoted_includes(os.path.join(root, rel)):
            n_inc += 1
            where = f"{rel}:{line}: includes"
            tgt = resolve(root, rel, name)
            if tgt is None:
                edges[rel].append((line, "(generated)" if name in ALLOWED_UNRESOLVED else "(unresolved)"))
                if name not in ALLOWED_UNRESOLVED:
                    tried = ", ".join(dict.fromkeys((os.path.dirname(rel) + "/", "src/", "include/")))
                    problems.append((rel, line, f'{where} "{name}": resolves to no file (tried {tried})'))
                continue
            if tgt.split("/")[0] not in CHECKED_DIRS:
                edges[rel].append((line, "(outside)"))
                problems.append((rel, line, f"{where} {tgt}: outside src/ and include/ (bench/, tests/, tools/ "
                                            "are not library code)"))
                continue
            edges[rel].append((line, tgt))
            if tgt in graph:
                graph[rel].add(tgt)
            tlayer, _ = layer_of(tgt)
            if layer and tlayer and LAYERS[tlayer] > LAYERS[layer]:
                problems.append((rel, line, f"{where} {tgt} ({tlayer}, rank {LAYERS[tlayer]}) from {layer} "
                                            f"(rank {LAYERS[layer]}): runs back up"))
            tgroup, theirs = side_group(tgt)
            if group and tgroup == group and theirs != mine:
                problems.append((rel, line, f"{where} {tgt}: {mine} and {theirs} sit side by side and must not "
                                            "include each other"))
            tsub = sub_rank(tgt)
            if sub and tsub and sub[0] == tsub[0] and None not in (sub[2], tsub[2]) and tsub[2] > sub[2]:
                problems.append((rel, line, f"{where} {tgt} ({tsub[1] or '.'}, rank {tsub[2]}) from "
                                            f"{sub[1] or '.'} (rank {sub[2]}): runs back up within {sub[0]}"))
    problems.sort()
    out = [p[2] for p in problems]
    cycles = find_cycles(graph)
    out += ["cycle: " + " -> ".join(c) for c in cycles]
    if len(cycles) >= MAX_CYCLES:
        out.append(f"cycle: (stopped after {MAX_CYCLES} cycles)")
    return out, files, n_inc, edges


def order_text():
    by_rank = {}
    for name, rank in LAYERS.items():
        by_rank.setdefault(rank, []).append(name)
    return " < ".join(g[0] if len(g) == 1 else "(" + ", ".join(g) + ")" for _, g in sorted(by_rank.items()))


def print_list(files, edges):
    layers = {}
    for rel in files:
        layers.setdefault(layer_of(rel)[0] or "(no layer)", []).append(rel)
    for name in sorted(layers, key=lambda n: LAYERS.get(n, 99)):
        counts = collections.Counter(t if t.startswith("(") else (layer_of(t)[0] or "(no layer)")
                                     for rel in layers[name] for _, t in edges[rel])
        out = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: LAYERS.get(kv[0], 99)))
        print(f"{name} (rank {LAYERS.get(name, '-')}): {len(layers[name])} files; includes -> {out or 'none'}")
        for rel in layers[name]:
            print(f"    {rel}")


def run(root, listing=False):
    problems, files, n_inc, edges = check(root)
    if listing:
        print_list(files, edges)
    print("\n".join(problems + [f"layers: {len(files)} files, {n_inc} includes, order {order_text()}: "
                                f"{f'{len(problems)} violations' if problems else 'OK'}"]))
    return 1 if problems else 0


SELF_TEST_TREE = {
    "include/tprof.h": "",
    "src/core/util.h": '#include "tprof.h"\n',                                     # good (include/)
    "src/core/util.c": '#include "util.h"\n/* #include "ir/graph.h" */\n'          # good (own folder)
                       '// #include "nothere.h"\nconst char *s = "// not a comment";\n'
                       '#  include "tp_build_info.h"\n',                           # allowed unresolved
    "src/ir/graph.h": '#include "core/util.h"\n#include "planner/plan.h"\n',       # good, then upward
    "src/planner/plan.h": '#include "ir/graph.h"\n',                               # closes a cycle
    "src/planner/plan.c": '#include "plan.h"\n#include "missing.h"\n',             # unresolved
    "src/foo/x.c": '#include "tprof.h"\n',                                         # unknown folder
    "src/exec/cpu/a.c": '#include "exec/cuda/b.h"\n',                              # side by side
    "src/exec/cuda/b.h": "#ifdef TPROF_HAVE_CUDA\n#endif\n",                        # good (not src/bench)
    "src/bench/run.c": '#include "exec/cuda/b.h"\n/* #ifdef TPROF_HAVE_CUDA */\n'  # good (downward, a comment)
                       "#ifndef TP_RUN_H\n#endif\n#ifdef TPROF_HAVE_CUDA\n#endif\n"  # good, then on CUDA
                       "#if defined(A) && \\\n    defined(__CUDACC__)\n#endif\n",   # on CUDA, over 2 lines
    "src/exec/cuda/ptx/p.cuh": '#include "exec/cuda/engine/e.h"\n',                # sub-rank upward
    "src/exec/cuda/engine/e.h": '#include "../gemm/g.h"\n',                        # good (downward)
    "src/exec/cuda/gemm/g.h": '#include "exec/cuda/vendor/v.h"\n',                 # good (sibling)
    "src/exec/cuda/vendor/v.h": '#include "../../../../bench/lab.h"\n',            # outside
    "bench/lab.h": '#include "exec/cuda/b.h"\n',                                   # not checked
}
SELF_TEST_EXPECTED = [
    "src/bench/run.c:5: a preprocessor conditional on TPROF_HAVE_CUDA: src/bench/ compiles the same with and "
    "without CUDA (its GPU calls go through src/exec/executor.h)",
    "src/bench/run.c:7: a preprocessor conditional on __CUDACC__: src/bench/ compiles the same with and without "
    "CUDA (its GPU calls go through src/exec/executor.h)",
    "src/exec/cpu/a.c:1: includes src/exec/cuda/b.h: src/exec/cpu and src/exec/cuda sit side by side and must "
    "not include each other",
    "src/exec/cuda/ptx/p.cuh:1: includes src/exec/cuda/engine/e.h (engine, rank 3) from ptx (rank 0): "
    "runs back up within src/exec/cuda",
    "src/exec/cuda/vendor/v.h:1: includes bench/lab.h: outside src/ and include/ (bench/, tests/, tools/ are "
    "not library code)",
    "src/foo/x.c: folder 'foo' has no layer in the table",
    "src/ir/graph.h:2: includes src/planner/plan.h (planner, rank 5) from ir (rank 2): runs back up",
    'src/planner/plan.c:2: includes "missing.h": resolves to no file (tried src/planner/, src/, include/)',
    "cycle: src/ir/graph.h -> src/planner/plan.h -> src/ir/graph.h",
]


# The self-test runs on tables of its own, so that editing the real ones above never breaks it.
SELF_TEST_TABLES = {"LAYERS": {"core": 0, "ir": 2, "planner": 5, "exec": 6, "bench": 8}, "INCLUDE_DIR_LAYER": "core",
                    "SAME_IN_EVERY_BUILD": ("src/bench",),
                    "SIDE_BY_SIDE": [("src/exec/cpu", "src/exec/cuda")], "ALLOWED_UNRESOLVED": {"tp_build_info.h"},
                    "SUB_RANKS": {"src/exec/cuda": {"ptx": 0, "gemm": 2, "vendor": 2, "engine": 3, "": 3}}}


def self_test():
    saved = {k: globals()[k] for k in SELF_TEST_TABLES}
    globals().update(SELF_TEST_TABLES)
    try:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in SELF_TEST_TREE.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            got, files, n_inc, _ = check(root)
    finally:
        globals().update(saved)
    ok = got == SELF_TEST_EXPECTED and len(files) == 14 and n_inc == 15
    for line in sorted(set(got) ^ set(SELF_TEST_EXPECTED)):
        print(("unexpected: " if line in got else "missing:    ") + line)
    print(f"self-test: {len(got)} violations reported, {len(SELF_TEST_EXPECTED)} expected, "
          f"{len(files)} files, {n_inc} includes: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = set(argv) - set(args)
    if flags - {"--list", "--self-test"} or len(args) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    if "--self-test" in flags:
        return self_test()
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src")):
        print(f"check_layers: {root} has no src/ folder", file=sys.stderr)
        return 2
    return run(root, listing="--list" in flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
