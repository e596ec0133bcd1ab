"""migration-convert-checkpoint: an Estimator checkpoint for a Keras port
(estimator.py) or a port on JAX (arrays.py), or the port's Keras 2
checkpoint for Keras 3 (keras2.py); what they share (files.py); --verify
(verify.py) and the legacy predictions recorded for it on TF 2.15
(predictions.py); the command (command.py)."""
