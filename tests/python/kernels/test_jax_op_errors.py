"""What a jax_op refuses, and how it says so: every error names the op (and the call) and
the reason."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch
from _jax_kernels import SOFTMAX, _softmax_call
from _subprocess import run_python

import torchtpu
from torchtpu.kernels import JaxOpError, export


def test_without_jax_the_error_says_what_to_install() -> None:
    r = run_python("""
        import sys
        sys.modules["jax"] = None  # as if JAX were not installed
        import torchtpu
        try:
            torchtpu.jax_op("mylib::double", lambda x: x * 2)
        except ImportError as e:
            print("ERROR", e)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ERROR torchtpu.jax_op needs JAX" in r.stdout
    assert "pip install 'jax==0.10.2' 'jaxlib==0.10.2'" in r.stdout


@pytest.mark.parametrize("name, message", [
    ("double", "is not 'namespace::name'"),
    ("my lib::double", "is not 'namespace::name'"),
    ("aten::double", "namespace 'aten' is reserved"),
])
def test_op_names(name: str, message: str) -> None:
    with pytest.raises(JaxOpError, match=message):
        torchtpu.jax_op(name, lambda x: x * 2)


def test_a_name_defined_twice() -> None:
    torchtpu.jax_op("jaxerr::twice", lambda x: x * 2)
    with pytest.raises(JaxOpError, match="jaxerr::twice is already defined in this process"):
        torchtpu.jax_op("jaxerr::twice", lambda x: x * 3)


def test_signature_errors() -> None:
    with pytest.raises(JaxOpError, match="static argument 'n' needs an int, float"):
        torchtpu.jax_op("jaxerr::untyped", lambda x, n: x * n, static_argnames=("n",))
    with pytest.raises(JaxOpError, match="static_argnames \\['m'\\] are not parameters"):
        torchtpu.jax_op("jaxerr::unknown", lambda x, n=1: x * n, static_argnames=("m",))
    with pytest.raises(JaxOpError, match="array argument 'y' has a default"):
        torchtpu.jax_op("jaxerr::default", lambda x, y=None: x)
    with pytest.raises(JaxOpError, match="takes no array argument"):
        torchtpu.jax_op("jaxerr::noarray", lambda n=1: jnp.zeros(n), static_argnames=("n",))
    with pytest.raises(JaxOpError, match="donated argument 'n' is not an array"):
        torchtpu.jax_op("jaxerr::donate_static", lambda x, n=1: x, donate_argnums=(1,),
                        static_argnames=("n",))


def test_unsupported_input_dtype_names_the_op_and_call() -> None:
    x = torch.empty(16, 8, dtype=torch.float8_e4m3fn, device="meta")
    with pytest.raises(JaxOpError, match=r"jaxtest::blocked_softmax\(float8_e4m3fn\[16, 8\].*"
                                         r"dtype torch.float8_e4m3fn is not supported"):
        SOFTMAX(x)


def test_unsupported_output_dtype() -> None:
    op = torchtpu.jax_op("jaxerr::int4", lambda x: x.astype(jnp.int4))
    with pytest.raises(JaxOpError, match="jaxerr::int4.*output 0 has dtype int4"):
        op(torch.ones(4, device="tpu"))


def test_shape_errors_come_from_jax_with_the_call() -> None:
    op = torchtpu.jax_op("jaxerr::add", lambda x, y: x + y)
    with pytest.raises(JaxOpError, match=r"jaxerr::add\(float32\[3\], float32\[4\]\): JAX could "
                                         "not export it.*incompatible shapes"):
        op(torch.ones(3, device="tpu"), torch.ones(4, device="tpu"))


def test_jaxlib_cpu_kernels_are_refused() -> None:
    op = torchtpu.jax_op("jaxerr::inv", jnp.linalg.inv)
    with pytest.raises(JaxOpError, match="jaxerr::inv.*lapack_.*the XLA CPU plugin does not have"):
        op(torch.eye(3, device="tpu"))


def test_callbacks_are_refused() -> None:
    def noisy(x):
        jax.debug.print("x = {}", x)
        return x * 2

    op = torchtpu.jax_op("jaxerr::noisy", noisy)
    with pytest.raises(JaxOpError, match="jaxerr::noisy.*host_callbacks"):
        op(torch.ones(2, device="tpu"))


def test_donation_needs_a_matching_output() -> None:
    op = torchtpu.jax_op("jaxerr::shrink", lambda x: x[:2] * 2, donate_argnums=(0,))
    with pytest.raises(JaxOpError, match=r"jaxerr::shrink: donated argument\(s\) \['x'\] have no "
                                         "output of the same shape and dtype"):
        op(torch.ones(4, device="tpu"))


def test_output_structure_must_not_depend_on_shapes() -> None:
    op = torchtpu.jax_op("jaxerr::shifty", lambda x: x if x.shape[0] == 2 else (x, x))
    op(torch.ones(2, device="tpu"))
    with pytest.raises(JaxOpError, match=r"jaxerr::shifty: the call with \(x=float32\[3\]\) "
                                         r"returns \('\*', '\*'\) .* earlier call returned "
                                         r"'\*' with \[\]; an op's output structure"):
        op(torch.ones(3, device="tpu"))


def test_a_platform_jax_cannot_lower_for(monkeypatch) -> None:
    # What a CUDA plugin meets when JAX cannot lower a kernel for the GPU: with a CPU-only
    # jaxlib Pallas has no GPU lowering at all, with Triton's Python package installed the
    # GPU lowering refuses these 8x8 blocks. (The CUDA plugin does not run here, so the
    # platform is what that plugin would report.)
    monkeypatch.setattr(export, "plugin_platform", lambda: "cuda")
    with pytest.raises(JaxOpError, match=r"jaxerr::pallas_on_gpu\(float32\[16, 8\]\): JAX could "
                                         r"not export it for the plugin's platform 'cuda': "
                                         r"ValueError: \S"):
        export.export_call("jaxerr::pallas_on_gpu", lambda x: _softmax_call(x, 8),
                           [export.TensorSpec(torch.float32, (16, 8))], {}, [])


def test_tensor_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="argument 'x' must be a tensor, got float"):
        SOFTMAX(1.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rows'"):
        SOFTMAX(torch.ones(8, 8, device="tpu"), rows=4)


def test_an_invalid_module_from_jax_is_not_called_a_version_mismatch() -> None:
    # Pallas's interpret mode on a 0-d array writes a dynamic_slice without sizes: the
    # message blamed the plugin's StableHLO version, the same as JAX's.
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    op = torchtpu.jax_op("jaxerr::pallas_0d", lambda x: pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x))
    assert op(torch.ones(4, device="tpu")).cpu().tolist() == [2.0] * 4
    with pytest.raises(JaxOpError, match="not valid StableHLO") as e:
        op(torch.tensor(3.0, device="tpu"))
    assert "cannot read" not in str(e.value)
