#!/usr/bin/env python3
"""Checks tprof's call order: the calls between the C/CUDA files of src/ and include/, as check_layers.py checks
their includes.

usage: check_calls.py [REPO_ROOT]        check (default root: the parent of scripts/); exit 1 on violations, 2 on misuse
       check_calls.py --list [FOLDER]    print the file call graph of FOLDER (default: src), one example call per
                                         edge, and its cycles; a folder inside a repository uses that repository
       check_calls.py --self-test        run the checker on a small synthetic tree; exit 0 when it behaves

What counts (a careful tokenizer, not a compiler; good enough for this codebase):
- Comments, string and char literals and preprocessor lines (with their continuations) are dropped first, so a
  call in a comment, a string or a macro body is not seen.
- A function is defined where a file-scope `NAME(...) {` appears (after `extern "C"`, `namespace` and
  attributes such as __launch_bounds__(...)). In a header (*.h *.cuh) every definition (static inline, templates)
  counts as the header's. In a *.c or *.cu file, static functions and those in an anonymous namespace are the
  file's own and never the target of another file's call.
- A call is an identifier in a function body followed by `(`, by `<<<` (a kernel launch) or by a template argument
  list and then one of those, that is not preceded by `.` or `->` and names a function defined in another file.
  A call to a name the file defines itself stays inside the file. A name defined in several other files resolves
  to those of them that are headers the caller includes (directly or not), else to all of them.
- Out of scope, so never an edge: calls through function pointers (tables, callbacks, hooks), calls written by a
  macro (a function-like macro's body is a preprocessor line; its use is not a function), member functions of
  structs and classes, file-scope initializers.
- A file whose braces do not balance once its preprocessor lines are dropped (a definition's head split by #if)
  is a violation: its calls cannot all be seen.

Rules (file A -> file B when a function of A calls one of B, B != A):
1. No call runs back up: A's layer (check_layers.LAYERS, by the first folder under src/; include/ is core) has a
   rank at least B's; inside a folder of check_layers.SUB_RANKS, A's sub-folder a rank at least B's; the folders of
   check_layers.SIDE_BY_SIDE do not call each other.
2. No cycles among files: every elementary cycle of the file call graph is reported once, starting at its
   smallest file, with one example call per edge. A cycle through an upward call is not listed (that call is the
   violation to fix, and one of them would close dozens of cycles), so a cycle across layers always shows as an
   upward call, and the cycles listed lie within one layer (or sub-folders of one rank).
3. The ratchet: ALLOWLIST (scripts/call_cycles_allowed.txt) names the cycles and upward calls that exist today,
   one a line as the check prints them (`cycle: A -> B -> A`, `up: A -> B`). A violation not in it fails, and so
   does a line of it that no longer holds, so the list only shrinks and stays true.
"""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers as layers  # noqa: E402  (LAYERS, SUB_RANKS, SIDE_BY_SIDE and the cycle search are shared)

ALLOWLIST = "scripts/call_cycles_allowed.txt"
HEADER_EXTS = (".h", ".cuh")

PREPROCESSOR_RE = re.compile(r"^[ \t]*#(?:\\\n|[^\n])*", re.M)
TOKEN_RE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|([A-Za-z_]\w*)|\.?\d(?:[eEpP][+-]|[\w.])*'
                      r"|<<<|>>>|->|::|<<|>>|\n|\S")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "_Alignof", "case", "do", "else",
            "goto", "defined", "__typeof__", "typeof", "decltype", "static_assert", "_Static_assert",
            "_Generic", "new", "delete", "throw", "catch"}
# Followed by (...), these decorate a declaration and name no function.
ATTRIBUTES = {"__attribute__", "__declspec", "__launch_bounds__", "__align__", "alignas", "_Alignas",
              "__cluster_dims__", "__asm__", "asm", "noexcept"}
QUALIFIERS = {"const", "volatile", "noexcept", "override", "final"}
CLOSE = {"(": ")", "[": "]", "{": "}"}


def tokens(path):
    """[(text, line)] of a file with comments, literals (a string becomes '""') and preprocessor lines dropped."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = PREPROCESSOR_RE.sub(lambda m: "\n" * m[0].count("\n"), layers.strip_comments(f.read()))
    out, line = [], 1
    for m in TOKEN_RE.finditer(text):
        t = m[0]
        if t == "\n":
            line += 1
        elif t[0] == '"':
            out.append(('""', line))
        elif t[0] != "'":
            out.append((t, line))
    return out


def match(toks, i):
    """Index of the bracket closing toks[i] (counting only its own kind), or None when the file ends first."""
    want, depth = CLOSE[toks[i][0]], 0
    for j in range(i, len(toks)):
        t = toks[j][0]
        if t == toks[i][0]:
            depth += 1
        elif t == want:
            depth -= 1
            if depth == 0:
                return j
    return None


def declared_name(decl):
    """The function a file-scope declaration followed by '{' defines, or None (struct, initializer, ...)."""
    d = [t for t, _ in decl]
    while d:
        if d[-1] in QUALIFIERS:
            d.pop()
            continue
        if d[-1] != ")":
            return None
        depth, j = 0, len(d) - 1
        while j >= 0:  # the '(' matching the last ')'
            depth += {")": 1, "(": -1}.get(d[j], 0)
            if depth == 0:
                break
            j -= 1
        if j < 1 or not re.match(r"[A-Za-z_]", d[j - 1]):
            return None
        if d[j - 1] in ATTRIBUTES:
            del d[j - 1:]
            continue
        return None if d[j - 1] in KEYWORDS else d[j - 1]
    return None


def definitions(toks):
    """([(name, local, line, body start, body end)], problem or None) for the file-scope function definitions;
    local: static, or in an anonymous namespace."""
    funcs, stack, decl, i = [], [], 0, 0
    while i < len(toks):
        t = toks[i][0]
        if t == ";":
            decl = i + 1
        elif t == "}":
            if not stack:
                return funcs, f"line {toks[i][1]}: '}}' closes nothing (braces split by #if?)"
            stack.pop()
            decl = i + 1
        elif t in "([":
            j = match(toks, i)
            if j is None:
                return funcs, f"line {toks[i][1]}: '{t}' never closed"
            i = j
        elif t == "{":
            d = [x for x, _ in toks[decl:i]]
            if d[:1] == ["namespace"] and len(d) <= 2 or d == ["extern", '""']:
                stack.append(d == ["namespace"])  # transparent; an anonymous namespace makes its functions local
                decl = i + 1
            else:
                end = match(toks, i)
                if end is None:
                    return funcs, f"line {toks[i][1]}: '{{' never closed (braces split by #if?)"
                name = declared_name(toks[decl:i])
                if name:
                    funcs.append((name, "static" in d or any(stack), toks[i][1], i + 1, end))
                    decl = end + 1
                i = end
        i += 1
    return funcs, (f"end of file inside a namespace or extern \"C\" block" if stack else None)


def template_call(toks, k):
    """Whether toks[k] '<' opens a template argument list followed by '(' or '<<<'."""
    depth = 0
    for j in range(k, min(len(toks), k + 64)):
        t = toks[j][0]
        if t in (";", "{", "}"):
            return False
        depth += {"<": 1, ">": -1, ">>": -2}.get(t, 0)
        if depth <= 0:
            return depth == 0 and j + 1 < len(toks) and toks[j + 1][0] in ("(", "<<<")
    return False


def calls(toks, start, end, known):
    """[(name, line)] of the calls in toks[start:end] to names in known."""
    out = []
    for k in range(start, end):
        t = toks[k][0]
        if t not in known or toks[k - 1][0] in (".", "->"):
            continue
        nxt = toks[k + 1][0] if k + 1 < len(toks) else ""
        if nxt in ("(", "<<<") or nxt == "<" and template_call(toks, k + 1):
            out.append((t, toks[k][1]))
    return out


def scan(root, files):
    """(defs {file: {name: line}}, targets {name: [files]}, raw calls {file: [(caller, name, line)]}, problems)."""
    parsed, defs, targets, problems = {}, {}, {}, []
    for rel in files:
        toks = tokens(os.path.join(root, rel))
        funcs, why = definitions(toks)
        if why:
            problems.append(f"{rel}: {why}; its calls are not all seen")
        parsed[rel] = (toks, funcs)
        defs[rel] = {}
        for name, local, line, _, _ in funcs:
            defs[rel].setdefault(name, line)
            if rel.endswith(HEADER_EXTS) or not local:
                targets.setdefault(name, [])
                if rel not in targets[name]:
                    targets[name].append(rel)
    raw = {}
    for rel, (toks, funcs) in parsed.items():
        raw[rel] = [(fn, name, line) for fn, _, _, s, e in funcs for name, line in calls(toks, s, e, targets)
                    if name not in defs[rel]]
    return defs, targets, raw, problems


def included(root, files):
    """{file: set of the files it includes, directly or not} (quoted includes, resolved as check_layers does)."""
    direct = {rel: {t for _, n in layers.quoted_includes(os.path.join(root, rel))
                    if (t := layers.resolve(root, rel, n))} for rel in files}
    closure = {}
    for rel in files:
        seen, stack = set(), [rel]
        while stack:
            for t in direct.get(stack.pop(), ()):
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        closure[rel] = seen
    return closure


def callees(name, caller, targets, visible):
    """The files a call resolves to: the headers the caller includes that define the name (C++ overloads of one
    name in several headers), else every file that defines it for others."""
    return [b for b in targets[name] if b in visible[caller]] or targets[name]


def upward(a, b):
    """Why a call from file a to file b runs back up, or None."""
    la, lb = layers.layer_of(a)[0], layers.layer_of(b)[0]
    if la and lb and layers.LAYERS[lb] > layers.LAYERS[la]:
        return f"{lb}, rank {layers.LAYERS[lb]}, from {la}, rank {layers.LAYERS[la]}"
    sa, sb = layers.sub_rank(a), layers.sub_rank(b)
    if sa and sb and sa[0] == sb[0] and None not in (sa[2], sb[2]) and sb[2] > sa[2]:
        return f"{sb[1] or '.'}, rank {sb[2]}, from {sa[1] or '.'}, rank {sa[2]}, within {sa[0]}"
    (ga, fa), (gb, fb) = layers.side_group(a), layers.side_group(b)
    if ga and ga == gb and fa != fb:
        return f"{fa} and {fb} sit side by side"
    return None


def graph_of(root, files):
    """(graph {file: set(files)}, example {(a, b): 'a.c:fn -> b.c:fn2'} (the first call seen), problems)."""
    _, targets, raw, problems = scan(root, files)
    visible = included(root, files)
    graph, example = {f: set() for f in files}, {}
    base = os.path.basename
    for a in files:
        for fn, name, _ in raw[a]:
            for b in callees(name, a, targets, visible):
                graph[a].add(b)
                example.setdefault((a, b), f"{base(a)}:{fn} -> {base(b)}:{name}")
    return graph, example, problems


def cycle_key(c):
    return "cycle: " + " -> ".join(c)


def findings(graph, example):
    """{key: detail} of the upward calls and the cycles of a graph."""
    out, level = {}, {a: set() for a in graph}
    for a in sorted(graph):
        for b in sorted(graph[a]):
            why = upward(a, b)
            if why:
                out[f"up: {a} -> {b}"] = f"({why}) e.g. {example[(a, b)]}"
            else:
                level[a].add(b)
    cycles = layers.find_cycles(level)  # a cycle through an upward call is that call's violation, not one more
    for c in cycles:
        out[cycle_key(c)] = "; ".join(example[(c[i], c[i + 1])] for i in range(len(c) - 1))
    if len(cycles) >= layers.MAX_CYCLES:
        out[f"cycle: (stopped after {layers.MAX_CYCLES} cycles)"] = ""
    return out


def read_allowlist(path):
    """[(line number, key)] of an allowlist; '#' starts a comment. A missing file is an empty list."""
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [(n, s) for n, line in enumerate(f, 1) if (s := " ".join(line.split("#", 1)[0].split()))]


def check(root):
    """(lines to print, violations, files, file edges, allowed findings that remain)."""
    files = [f for f in layers.source_files(root) if f.startswith("src/") or f.startswith("include/")]
    graph, example, problems = graph_of(root, files)
    found = findings(graph, example)
    allowed = read_allowlist(os.path.join(root, ALLOWLIST))
    allowed_keys = {k for _, k in allowed}
    bad = [f"{rel}" for rel in problems]
    bad += [f"{k}  [{v}]" for k, v in found.items() if k not in allowed_keys]
    bad += [f"{ALLOWLIST}:{n}: '{k}' is allowed but no longer found: delete the line" for n, k in allowed
            if k not in found]
    remaining = sum(1 for _, k in allowed if k in found)
    n_edges = sum(len(v) for v in graph.values())
    return bad, files, n_edges, remaining


def run(root):
    bad, files, n_edges, remaining = check(root)
    for line in bad:
        print(line)
    print(f"calls: {len(files)} files, {n_edges} call edges, {remaining} allowed cycles and upward calls remaining "
          f"in {ALLOWLIST}: {f'{len(bad)} violations' if bad else 'OK'}")
    return 1 if bad else 0


def list_folder(folder):
    """Print the call graph among the files of a folder (calls leaving it are counted per target folder)."""
    folder = os.path.abspath(folder)
    root = folder
    while not os.path.isdir(os.path.join(root, "src")) or not os.path.isdir(os.path.join(root, "scripts")):
        if os.path.dirname(root) == root:
            print(f"check_calls: {folder} lies in no repository (a folder with src/ and scripts/)", file=sys.stderr)
            return 2
        root = os.path.dirname(root)
    if folder == root:
        folder = os.path.join(root, "src")
    prefix = os.path.relpath(folder, root).replace(os.sep, "/") + "/"
    files = [f for f in layers.source_files(root) if f.startswith(("src/", "include/"))]
    graph, example, problems = graph_of(root, files)
    mine = [f for f in files if f.startswith(prefix)]
    for p in problems:
        print(p)
    for a in mine:
        inside = sorted(b for b in graph[a] if b.startswith(prefix))
        outside = {}
        for b in graph[a] - set(inside):
            outside[os.path.dirname(b)] = outside.get(os.path.dirname(b), 0) + 1
        print(f"{a}: calls {len(inside)} files here" + (", outside: " + ", ".join(
            f"{d}/ {n}" for d, n in sorted(outside.items())) if outside else ""))
        for b in inside:
            print(f"    -> {b}  e.g. {example[(a, b)]}")
    sub = {a: {b for b in graph[a] if b.startswith(prefix)} for a in mine}
    cycles = layers.find_cycles(sub)
    for c in cycles:
        print(cycle_key(c) + "\n    " + "; ".join(example[(c[i], c[i + 1])] for i in range(len(c) - 1)))
    print(f"{prefix}: {len(mine)} files, {sum(len(v) for v in sub.values())} call edges among them, "
          f"{len(cycles)} cycles")
    return 0


# A small tree: each file's comment says what the checker must make of it.
SELF_TEST_TREE = {
    "include/tprof.h": "int tp_api(int x);\n",
    "src/core/util.h": "#define CALL_LOW(x) low_fn(x) /* a macro body is no call */\n"
                       "static inline int util_min(int a, int b) { return a < b ? a : b; }\n",
    "src/core/other.h": "static inline int util_min(int a, int b) { return a; }\n",  # not included by util.c
    "src/core/util.c": '#include "util.h"\nint util_fn(int x) {\n'
                       '    // ir_fn(x) in a comment\n    const char *s = "ir_fn(x) { in a string";\n'
                       "    char c = '}';\n    return util_min(x, 1) + (s != 0) + c;\n}\n",
    "src/core/split.c": "#ifdef A\nint split(int x) {\n#else\nint split(int x, int y) {\n#endif\n"
                        "    return x;\n}\n",                                # braces split by #if: reported
    "src/core/low.c": "struct ops { int (*plan_fn)(int); };\n"                # a member: no call of plan.c
                      "int low_fn(int x) { struct ops o = {0}, *p = &o; return o.plan_fn(x) + p->plan_fn(x); }\n",
    "src/ir/graph.c": '#include "core/util.h"\nint CALL_LOW(int y);\n'       # a prototype: no definition
                      "static int helper(int v) { return util_fn(v); }\n"   # ir -> core: fine
                      "int ir_fn(int x) {\n#define TWICE(v) \\\n    (low_fn(v) * 2)\n"  # a macro's body: no call
                      "    return CALL_LOW(x) + TWICE(x) + helper(x) + plan_fn(x) + shape_fn(x);\n}\n",  # upward call
    "src/ir/shape.c": "int shape_fn(int x) { return x > 0 ? ir_fn(x - 1) : 0; }\n",  # a cycle within ir
    "src/planner/plan.c": "int plan_fn(int x) { return ir_fn(x); }\n",      # a cycle through the upward call
    "src/exec/cuda/ptx/p.cuh": "template <int N> __device__ int p_fn(int x) { return e_fn(x); }\n",  # sub-rank up
    "src/exec/cuda/engine/e.c": "static int helper(int v) { return v; }\n"  # a static twin: no edge to graph.c
                                "int e_fn(int x) { return helper(x) + kern(0); }\n",  # kern: k.cu's own
    "src/exec/cuda/engine/f.c": "int f_fn(int x) { return g_fn(x); }\n",
    "src/exec/cuda/engine/g.c": "static int e_fn(int x) { return x; }\n"   # its own e_fn: no edge to e.c
                                "int g_fn(int x) { return f_fn(e_fn(x)); }\n",  # an allowed cycle f <-> g
    "src/exec/cuda/gemm/k.cu": '#include "../ptx/p.cuh"\nnamespace {\n__global__ void __launch_bounds__(128) '
                               "kern(int *y) { *y = p_fn<4>(1); }\n}  // namespace\n"
                               'extern "C" {\nint k_fn(int *y) noexcept(true) { kern<<<1, 1>>>(y); return 0; }\n}\n',
    "src/exec/cuda/engine/h.c": "int h_fn(int *y) { return k_fn(y) + helper(0); }\n",  # engine -> gemm: fine;
    # helper is static in graph.c and e.c: no edge
    "scripts/call_cycles_allowed.txt": "# allowed\n"
                                       "cycle: src/exec/cuda/engine/f.c -> src/exec/cuda/engine/g.c -> "
                                       "src/exec/cuda/engine/f.c\n"
                                       "up: src/core/low.c -> src/ir/graph.c  # stale\n",
}
SELF_TEST_EXPECTED = [
    "src/core/split.c: line 2: '{' never closed (braces split by #if?); its calls are not all seen",
    "up: src/exec/cuda/ptx/p.cuh -> src/exec/cuda/engine/e.c  [(engine, rank 3, from ptx, rank 0, within "
    "src/exec/cuda) e.g. p.cuh:p_fn -> e.c:e_fn]",
    "up: src/ir/graph.c -> src/planner/plan.c  [(planner, rank 5, from ir, rank 2) e.g. graph.c:ir_fn -> "
    "plan.c:plan_fn]",
    "cycle: src/ir/graph.c -> src/ir/shape.c -> src/ir/graph.c  [graph.c:ir_fn -> shape.c:shape_fn; "
    "shape.c:shape_fn -> graph.c:ir_fn]",
    "scripts/call_cycles_allowed.txt:3: 'up: src/core/low.c -> src/ir/graph.c' is allowed but no longer found: "
    "delete the line",
]
# Every edge of the tree (the macro, the comment, the string, the static twin, the header util.c does not include
# and the prototype give none).
SELF_TEST_EDGES = {
    "src/core/util.c": {"src/core/util.h"}, "src/ir/shape.c": {"src/ir/graph.c"},
    "src/ir/graph.c": {"src/core/util.c", "src/planner/plan.c", "src/ir/shape.c"},
    "src/planner/plan.c": {"src/ir/graph.c"}, "src/exec/cuda/ptx/p.cuh": {"src/exec/cuda/engine/e.c"},
    "src/exec/cuda/engine/f.c": {"src/exec/cuda/engine/g.c"}, "src/exec/cuda/engine/g.c": {"src/exec/cuda/engine/f.c"},
    "src/exec/cuda/gemm/k.cu": {"src/exec/cuda/ptx/p.cuh"}, "src/exec/cuda/engine/h.c": {"src/exec/cuda/gemm/k.cu"},
}
SELF_TEST_TABLES = {"LAYERS": {"core": 0, "ir": 2, "planner": 5, "exec": 6}, "INCLUDE_DIR_LAYER": "core",
                    "SIDE_BY_SIDE": [("src/exec/cpu", "src/exec/cuda")],
                    "SUB_RANKS": {"src/exec/cuda": {"ptx": 0, "gemm": 2, "engine": 3, "": 3}}}


def self_test():
    saved = {k: getattr(layers, k) for k in SELF_TEST_TABLES}
    for k, v in SELF_TEST_TABLES.items():
        setattr(layers, k, v)
    try:
        with tempfile.TemporaryDirectory() as root:
            for rel, text in SELF_TEST_TREE.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            got, files, n_edges, remaining = check(root)
            graph = graph_of(root, files)[0]
    finally:
        for k, v in saved.items():
            setattr(layers, k, v)
    edges = {a: bs for a, bs in graph.items() if bs}
    ok = got == SELF_TEST_EXPECTED and edges == SELF_TEST_EDGES and remaining == 1 and len(files) == 15
    for line in sorted(set(got) ^ set(SELF_TEST_EXPECTED)):
        print(("unexpected: " if line in got else "missing:    ") + line)
    for a in sorted(set(edges) | set(SELF_TEST_EDGES)):
        if edges.get(a) != SELF_TEST_EDGES.get(a):
            print(f"edges of {a}: got {sorted(edges.get(a, ()))}, expected {sorted(SELF_TEST_EDGES.get(a, ()))}")
    print(f"self-test: {len(got)} violations reported, {len(SELF_TEST_EXPECTED)} expected, {len(files)} files, "
          f"{n_edges} call edges, {remaining} allowed remaining: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = set(argv) - set(args)
    if flags - {"--list", "--self-test"} or len(args) > 1 or len(flags) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    if "--self-test" in flags:
        return self_test()
    if "--list" in flags:
        return list_folder(args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src")):
        print(f"check_calls: {root} has no src/ folder", file=sys.stderr)
        return 2
    return run(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
