"""Effect tokens in AOTAutograd graphs.

AOTAutograd threads the ordered side effects of ops registered as effectful (such as
``aten._linalg_check_errors``, which ``linalg.inv``, ``linalg.solve`` and
``linalg.cholesky`` call to raise LinAlgError) through the graph as
``with_effects(token, op, *args)``, which returns ``(token, *results)``; the token is a
graph input and output (None at run time). A graph runs here as one program, and such an
op's effect is a data check read after the run (in graph order), so the op is called
directly and the token passes through unchanged: the caller gets its own token back. Token
placeholders are marked (meta "effect_token") so that the graph takes them as data-less.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from torchtpu.dynamo.graph_spec import UnsupportedGraph


def unwrap_effects(gm: torch.fx.GraphModule) -> None:
    """Rewrites every ``with_effects`` node of `gm` (in place) into a call of its op."""
    graph = gm.graph
    with_effects = torch.ops.higher_order.with_effects
    nodes = [n for n in graph.nodes if n.op == "call_function" and n.target is with_effects]
    for node in nodes:
        token, op, *args = node.args
        token.meta["effect_token"] = True
        val = node.meta.get("val")
        results = tuple(val[1:]) if isinstance(val, (tuple, list)) else ()
        with graph.inserting_before(node):
            call = graph.call_function(op, tuple(args), dict(node.kwargs))
        call.meta = dict(node.meta)
        call.meta["val"] = results[0] if len(results) == 1 else (results or None)
        for user in list(node.users):
            if user.op != "call_function" or user.target is not operator.getitem:
                raise UnsupportedGraph(f"tpu compile: {user.name} reads {node.name} "
                                       f"(with_effects of {op}) other than by index")
            index = user.args[1]
            if index == 0:
                replacement = token
            elif len(results) == 1:
                replacement = call
            else:
                with graph.inserting_before(user):
                    replacement = graph.call_function(operator.getitem, (call, index - 1))
                replacement.meta = dict(user.meta)
            user.replace_all_uses_with(replacement)
            graph.erase_node(user)
        graph.erase_node(node)
    if nodes:
        graph.lint()
        gm.recompile()
