"""`torchtpu serve`'s speed flags: a bad --speculative-config or --quantization is a clear
error and exit status 2, before any model is loaded."""

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
