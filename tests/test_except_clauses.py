"""Every `except (A, B)` in the product names exception classes, never a tuple of them.

`except (OSError, _http_errors())`, where `_http_errors()` returns a tuple, nests a tuple in
the tuple: Python matches the first name and, for any other exception, raises `TypeError:
catching classes that do not inherit from BaseException is not allowed` in place of the
error the clause was written for (with Prefect down, a `TypeError` instead of
`ProviderUnavailable`, which the failover retries). A call or a tuple-valued name inside
the parentheses is that bug; unpack it (`except (OSError, *_http_errors())`).
"""

import ast

import pytest

from tests.test_layers import BESIDE, LAYERS, ROOT

PRODUCT = sorted(p for folder in LAYERS + BESIDE for p in (ROOT / folder).rglob("*.py"))


def module_tuples(tree: ast.Module) -> set[str]:
    """Names the module binds at its top level to a tuple (or to what a call returns)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple | ast.Call):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def nested_tuples(source: str) -> list[tuple[int, str]]:
    """(line, clause) of each `except (...)` that holds a call or a tuple-valued module name."""
    tree = ast.parse(source)
    tuples = module_tuples(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and isinstance(node.type, ast.Tuple):
            for element in node.type.elts:
                if isinstance(element, ast.Call | ast.Tuple) or (
                    isinstance(element, ast.Name) and element.id in tuples
                ):
                    found.append((node.lineno, ast.unparse(node.type)))
                    break
    return found


def test_the_check_finds_the_pattern_and_passes_the_fix():
    bad = "def f():\n    try:\n        g()\n    except (OSError, _http_errors()) as e:\n        pass\n"
    named = "ERRS = (KeyError,)\ntry:\n    g()\nexcept (OSError, ERRS):\n    pass\n"
    good = "try:\n    g()\nexcept (OSError, *_http_errors()):\n    pass\nexcept (KeyError, ValueError):\n    pass\n"
    assert nested_tuples(bad) == [(4, "(OSError, _http_errors())")]
    assert nested_tuples(named) == [(4, "(OSError, ERRS)")]
    assert nested_tuples(good) == []


def test_python_raises_type_error_for_a_nested_tuple():
    """Why the pattern is a bug, not a style: the exception it was meant to catch is lost."""
    with pytest.raises(TypeError, match="do not inherit from BaseException"):
        try:
            raise OSError("connection refused")
        except (ValueError, (OSError,)):  # noqa: B030 (the bug, on purpose)
            pass


def test_no_except_clause_in_the_product_nests_a_tuple():
    found = [
        f"{path.relative_to(ROOT)}:{line}: except {clause}"
        for path in PRODUCT
        for line, clause in nested_tuples(path.read_text())
    ]
    assert not found, "a tuple inside an except tuple raises TypeError:\n" + "\n".join(found)
