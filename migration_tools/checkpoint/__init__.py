"""migration-convert-checkpoint: an Estimator checkpoint for the port
(estimator.py), or the port's Keras 2 checkpoint for Keras 3 (keras2.py);
--verify (verify.py); the command (command.py)."""
