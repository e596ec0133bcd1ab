"""The seven deliberate bugs of a BERT port, as bert_port.py (Keras) and
bert_jax_port.py (JAX) each write them: the port function, the check that
fails first and what its hint names. One table, so that a bug fails with the
same check and hint on TensorFlow and on JAX (tests/tools/test_user_pairs.py,
tests/tools/test_jax_ports.py)."""

BERT_BUGS = [
    ('no_weight_decay', 'updates (1 replica)',
     "weight-decay term (rate 0.01) that the port's lacks"),
    ('decay_on_layer_norm_and_bias', 'updates (1 replica)',
     'which variables the weight decay skips (e.g. LayerNorm and bias)'),
    ('no_clipping', 'one_step (1 replica)', 'clipping by global norm missing'),
    # The port names its layer otherwise on each framework: what follows
    # 'port: ' is its own ('bert_classifier/...' in Keras). The outputs
    # agree; the layer does not (0.0011 of its scale).
    ('layer_norm_epsilon_1e_6', 'inference',
     'they part at bert/embeddings/LayerNorm (port: '),
    ('no_warmup', 'one_step (1 replica)',
     "the legacy rate is 0 there, as a warmup from 0 starts: compare the "
     "port's warmup"),
    ('bias_corrected_adam', 'updates (1 replica)', "Adam's bias correction"),
    # The outputs agree at the start state (3e-8 apart at the pair's small
    # activations); the second layer's GELU does not (1.6e-5 of its scale,
    # where the bar is 1e-5: erf and tanh GELU part by a function, not by
    # rounding).
    ('erf_gelu', 'inference', 'they part at bert/encoder/layer_1/'
     'intermediate/dense (port: '),
]
