"""The offline feature store's forward: the same features and lm_head inputs, without the logits it does not keep."""

import torch

from distill.features.capture import final_hidden_states, layer_and_final_features, layer_features


def test_features_and_lm_head_inputs_come_from_one_forward_without_every_positions_logits(target, prompt_ids):
    ids = torch.tensor([prompt_ids[0], prompt_ids[0][::-1]])
    layers = [0, 1, target.config.num_hidden_layers]  # id N: the last layer's output, from a hook of its own
    widths = []
    hook = target.get_output_embeddings().register_forward_hook(lambda m, a, out: widths.append(out.shape[1]))
    try:
        features, last_hidden = layer_and_final_features(target, ids, None, layers)
    finally:
        hook.remove()
    assert widths == [1]  # the lm_head ran once, on one position: no (B, T, V) logits computed and dropped
    expected_features, _ = layer_features(target, ids, None, layers)
    expected_hidden, _ = final_hidden_states(target, ids)
    torch.testing.assert_close(features, expected_features)
    torch.testing.assert_close(last_hidden, expected_hidden)
    assert last_hidden.shape == (*ids.shape, target.config.hidden_size)
