"""Shape buckets: graphs with symbolic sizes run as static programs at bucket sizes.

- policy.py: which graphs pad and the bucket of a size;
- layout.py: where a padded dim's true elements sit;
- rules.py, rules_index.py: the rule of each op (exact on padding, or its mask or rewrite);
- rewriter.py: the pass driver applying them;
- plan.py: a graph's plan (inputs, outputs, what the backward takes padded);
- shape_class.py, fused_graph.py, recorded.py: fused eager graphs, recorded at concrete
  sizes, made symbolic and run padded like a compiled graph.
"""

from torchtpu.dynamo.buckets.plan import BucketPlan, Hazard, OutputForm, plan
from torchtpu.dynamo.buckets.policy import bucket_policy, bucket_size, recompile_limit

__all__ = ["BucketPlan", "Hazard", "OutputForm", "bucket_policy", "bucket_size", "plan",
           "recompile_limit"]
