"""What one SGLang tree of the 0.5.23 family computes for a drafter/target pair, from its own
code: run by ``report`` (``after_refactor/report.py``) in that family's environment, with the
tree first on ``sys.path``. It imports nothing of this package.

    python report_probe.py DRAFT TARGET ALGORITHM

Prints ``REPORT-JSON {...}``. What it runs, all on the CPU and from config folders (no weights):

- ``ServerArgs`` as a server builds them (the tree's argument resolution, its hooks included),
  and the draft ``ModelConfig`` the draft runner gets (``from_server_args``,
  ``is_draft_model=True``);
- ``get_draft_recurrent_hidden_state_spec_from_config`` (the width and dtype every idle input,
  the draft CUDA-graph buffer and the PD metadata buffer take), and
  ``get_draft_input_from_target_hidden_dim`` on a stand-in runner holding that config (the
  extend buffers' width);
- the drafter's ``fc``, built on the meta device from the draft config (no decoder layers):
  ``LlamaModel`` of ``models/llama_eagle3.py``, or ``_get_eagle_aux_layer_count`` of
  ``models/kimi_k25_eagle3.py``;
- the target's capture: ``_resolve_eagle_aux_hidden_state`` (the layer ids the target asks
  for), then the target class's own ``set_eagle3_layers_to_capture`` on a stand-in holding
  the target config: the layers whose input it captures, which are the indices into
  transformers' ``output_hidden_states``.

A ``ValueError`` the tree raises while reading the pair (a drafter it refuses) is the
``refusal``; the values it could not compute are ``None``.
"""

import argparse
import copy
import json
import logging
import os
import sys
import warnings
from types import SimpleNamespace


def _dtype(value):
    return None if value is None else str(value)


def _fc(draft, server_args):
    """(in_features, which model) of the drafter's fc, or (None, None) for another drafter."""
    import torch

    from sglang.srt.runtime_context import get_parallel

    architecture = (draft.hf_config.architectures or [""])[0]
    if architecture == "LlamaForCausalLMEagle3":
        from sglang.srt.models.llama_eagle3 import LlamaModel

        config = copy.deepcopy(draft.hf_config)
        config.num_hidden_layers = 0  # fc does not depend on the decoder layers
        group = SimpleNamespace(rank_in_group=0, world_size=1)
        with torch.device("meta"), get_parallel().override(tp_group=group, attn_tp_group=group):
            return LlamaModel(config).fc.in_features, "models/llama_eagle3.py LlamaModel.__init__"
    if "Eagle3" in architecture and "Kimi" in architecture:
        from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count

        hidden = getattr(draft.hf_config, "target_hidden_size", None) or draft.hidden_size
        return (
            hidden * _get_eagle_aux_layer_count(draft.hf_config),
            "models/kimi_k25_eagle3.py Eagle3MLAModel.__init__",
        )
    return None, None


def _captured(server_args, target, spec_algorithm):
    """(layer ids the target asks for, indices into output_hidden_states it captures)."""
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        SpecAuxHiddenStateConfig,
        _resolve_eagle_aux_hidden_state,
    )
    from sglang.srt.models.registry import ModelRegistry

    capture = SpecAuxHiddenStateConfig()
    _resolve_eagle_aux_hidden_state(
        config=capture,
        server_args=server_args,
        model_config=target,
        spec_algorithm=spec_algorithm,
        is_draft_worker=False,
    )
    if not capture.eagle_use_aux_hidden_state:
        return capture.eagle_aux_hidden_state_layer_ids, None
    model_class, _ = ModelRegistry.resolve_model_cls(target.hf_config.architectures)
    model = SimpleNamespace(
        pp_group=SimpleNamespace(is_last_rank=True),
        config=target.hf_config,
        model=SimpleNamespace(),
    )
    model_class.set_eagle3_layers_to_capture(model, capture.eagle_aux_hidden_state_layer_ids)
    return capture.eagle_aux_hidden_state_layer_ids, list(model.model.layers_to_capture)


def probe(draft_path: str, target_path: str, algorithm: str) -> dict:
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.eagle_utils import (
        get_draft_input_from_target_hidden_dim,
        get_draft_recurrent_hidden_state_spec_from_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    out = {"refusal": None}
    spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
    try:
        server_args = ServerArgs(
            model_path=target_path,
            device="cpu",
            speculative_algorithm=algorithm,
            speculative_draft_model_path=draft_path,
            skip_tokenizer_init=True,
        )
        context = create_context(server_args, role="report", ranks=SpawnRanks(world_rank=0))
        with use_context(context):
            target = ModelConfig.from_server_args(server_args)
            draft = ModelConfig.from_server_args(
                server_args, model_path=draft_path, is_draft_model=True
            )
            out["target_dtype"] = _dtype(target.dtype)
            out["draft_dtype"] = _dtype(draft.dtype)
            out["server_dtype"] = server_args.dtype
            width, dtype = get_draft_recurrent_hidden_state_spec_from_config(
                draft, spec_algorithm
            )
            out["recurrent"] = {"width": width, "dtype": _dtype(dtype)}
            out["carries_draft_hidden_states"] = spec_algorithm.carries_draft_hidden_states()
            runner = SimpleNamespace(model_config=draft, spec_algorithm=spec_algorithm)
            # the extend buffers exist for the EAGLE family only (the draft-extend runner
            # skips STANDALONE, the prefill runner asks is_eagle())
            out["extend"] = {
                "width": get_draft_input_from_target_hidden_dim(runner)
                if spec_algorithm.is_eagle()
                else None,
                "dtype": _dtype(draft.dtype) if spec_algorithm.is_eagle() else None,
            }
            fc_width, fc_site = _fc(draft, server_args)
            out["fc"] = {"width": fc_width, "site": fc_site, "dtype": _dtype(draft.dtype)}
            if spec_algorithm.is_eagle3():
                out["layer_ids"], out["captured"] = _captured(
                    server_args, target, spec_algorithm
                )
    except ValueError as exc:
        out["refusal"] = str(exc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("draft")
    parser.add_argument("target")
    parser.add_argument("algorithm")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    # SGLang logs to stdout: keep it for the JSON line only
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            result = probe(args.draft, args.target, args.algorithm)
        finally:
            sys.stdout = stdout
    print("REPORT-JSON " + json.dumps(result))


if __name__ == "__main__":
    main()
