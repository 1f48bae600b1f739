"""`torchtpu serve` and `torchtpu router` flags: a bad --speculative-config or
--quantization, or a number out of its range, is a clear error and exit status 2, before
any model is loaded."""

import pytest
import torch

from torchtpu.cli import main


@pytest.fixture(autouse=True)
def keep_thread_count():
    """main() sets PyTorch's thread count for the server; later tests keep theirs."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_speculative_config_must_be_json(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "--speculative-config", "{ngram"])
    assert e.value.code == 2
    assert "--speculative-config: not valid JSON" in capsys.readouterr().err


def test_a_speculative_method_we_do_not_have_is_named(capsys, tmp_path):
    assert main(["serve", "--model", str(tmp_path), "--speculative-config",
                 '{"method": "eagle", "num_speculative_tokens": 3}']) == 2
    assert "method 'eagle' is not supported; supported: 'ngram'" in capsys.readouterr().err


def test_quantization_choices(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve", "--quantization", "fp4"])
    assert e.value.code == 2
    assert "invalid choice: 'fp4'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["serve", "--max-request-sequences", "0"],
     "--max-request-sequences: 0 is out of range: expected from 1 to 2147483647"),
    # Past what the engine's C++ settings hold: a usage error, not a binding's TypeError.
    (["serve", "--max-num-seqs", "99999999999999999999"], "--max-num-seqs: 99999999999999999999 "
     "is out of range"),
    (["serve", "--num-pages", str(2**31)], "--num-pages: 2147483648 is out of range"),
    (["serve", "--max-num-seqs", "-1"], "--max-num-seqs: -1 is out of range"),
    (["serve", "--max-request-bytes", "0"], "--max-request-bytes: 0 is out of range"),
    (["serve", "--port", "65536"], "--port: 65536 is out of range: expected from 0 to 65535"),
    (["serve", "--page-size", "1e3"], "--page-size: '1e3' is not an integer"),
    # A device the engine cannot run on: before the model loads, not a late traceback.
    (["serve", "--device", "bogus"], "--device: 'bogus': expected tpu, tpu:N or cpu"),
    (["serve", "--device", "cuda"], "--device: 'cuda': expected tpu, tpu:N or cpu"),
    (["serve", "--device", "tpu:7"], "--device: 'tpu:7': this machine has 1 tpu device(s)"),
    (["router", "--replica", "http://127.0.0.1:1", "--routed-ttl", "nan"],
     "--routed-ttl: nan: expected a finite number of seconds above 0"),
    (["router", "--replica", "http://127.0.0.1:1", "--health-interval", "inf"],
     "--health-interval: inf: expected a finite number"),
    (["router", "--replica", "http://127.0.0.1:1", "--spill-threshold", "-2"],
     "--spill-threshold: -2 is out of range: expected from -1 to 2147483647"),
])
def test_numeric_flags_out_of_range_are_usage_errors(argv, message, capsys):
    """A count, port or interval out of its range stops at the command line (exit 2, the
    flag and the range named), before a model loads or a server listens."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("config", ["{not json", "[]"])
def test_a_model_folder_the_engine_cannot_start_from_is_a_clear_error(config, capsys, tmp_path):
    """A config.json that is corrupt or describes no usable model: one line naming the
    folder and the error, exit 2 (which a supervisor does not restart), no traceback."""
    (tmp_path / "config.json").write_text(config)
    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"cannot start the engine for {tmp_path}: " in err and "Traceback" not in err
