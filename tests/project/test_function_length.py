"""No function of the package is over 60 code lines: the lines of its body less its docstring,
blank lines and comment lines (a nested function's lines count in the function around it).
A longer one holds more than one concept; split it by concept."""
import ast
import io
import os
import tokenize

from conftest import ROOT

LIMIT = 60
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER}


def _code_lines(source):
    """The numbers of the lines that hold code (a string spanning lines holds code on each)."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def _docstring_lines(function):
    first = function.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return set(range(first.lineno, first.end_lineno + 1))
    return set()


def function_lengths(source):
    """``(qualified name, code lines)`` of every function in ``source``."""
    code = _code_lines(source)
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = set(range(child.body[0].lineno, child.end_lineno + 1))
                found.append((prefix + child.name,
                              len((body & code) - _docstring_lines(child))))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return found


def test_no_package_function_is_over_60_code_lines():
    long = []
    for folder, _, files in os.walk(os.path.join(ROOT, "mxmixed")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as handle:
                    source = handle.read()
                long += ["%s: %s (%d code lines)" % (os.path.relpath(path, ROOT), function, n)
                         for function, n in function_lengths(source) if n > LIMIT]
    assert not long, "split by concept: " + "; ".join(long)


def test_the_count_leaves_out_the_docstring_blank_and_comment_lines():
    source = ('def f():\n    """A docstring\n\n    over lines."""\n    # a comment\n\n'
              '    x = (1,\n         2)  # a statement over two lines\n    return x\n')
    assert function_lengths(source) == [("f", 3)]


def test_a_function_of_61_code_lines_is_over_the_limit():
    assert function_lengths("def f():\n" + "    x = 0\n" * 61) == [("f", LIMIT + 1)]


def test_a_nested_function_counts_in_its_own_name_and_in_the_one_around_it():
    source = ("class C:\n    def m(self):\n        '''Doc.'''\n        def inner():\n"
              "            return 1\n\n        return inner\n")
    assert function_lengths(source) == [("C.m", 3), ("C.m.inner", 1)]
