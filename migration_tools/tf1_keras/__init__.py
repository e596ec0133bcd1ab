"""Keras pieces a port takes to compute what its TF 1 model_fn computed,
where Keras's own defaults or Keras 3 do otherwise: optimizers.py (each TF 1
optimizer, the Keras settings that reproduce it, the guide's table, and
RMSpropFromOnes) and layers.py (BatchNormalization as TF 1's fused kernel).
A port imports them; the tools do not."""
