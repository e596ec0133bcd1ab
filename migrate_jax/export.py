"""The export: what TPUEstimator's ``export_saved_model`` wrote, on JAX.

A SavedModel needs TensorFlow. JAX's own serving artifact is an exported
program (``jax.export``): the predict function lowered to StableHLO with the
trained weights inside, serialized, and called back without the model's
code or Keras. Its signature is estimator_mnist's: raw uint8 pixels
``image [batch, 28, 28, 1]`` in, ``class_ids`` and ``probabilities`` out,
for any batch size (a symbolic dimension). It is lowered for the platform it
was exported on and for every other JAX lowers for (``PLATFORMS``), so the
same file is served on a CPU, a GPU (CUDA or ROCm) and a TPU; the loaded
program runs on the default device of the process that calls it.
"""
import json
import os
import time

import jax
from jax import export as jax_export
import jax.numpy as jnp
import numpy as np

from kit_core import atomic
from migrate_jax import divergence
from migrate_jax import model as model_lib

PROGRAM = 'serving.jaxexport'
SIGNATURE = 'signature.json'
# Every platform jax.export lowers for; lowering for one needs none of its
# hardware.
PLATFORMS = ('cpu', 'cuda', 'rocm', 'tpu')


def platforms() -> tuple[str, ...]:
  """The platform this process runs on first, then the others."""
  here = jax_export.default_export_platform()
  return (here, *(p for p in PLATFORMS if p != here))


def serving_program(model) -> jax_export.Exported:
  """The model's predict function, lowered with its current weights."""
  trainable = [np.asarray(v.value) for v in model.trainable_variables]
  non_trainable = [np.asarray(v.value) for v in model.non_trainable_variables]

  def serve(image):
    return model_lib.predict_probabilities(model, trainable, non_trainable,
                                           image)

  batch = jax_export.symbolic_shape('batch')[0]
  spec = jax.ShapeDtypeStruct((batch, *model_lib.IMAGE_SHAPE), jnp.uint8)
  return jax_export.export(jax.jit(serve), platforms=platforms())(spec)


def export(model, model_dir: str) -> str:
  """Writes model_dir/export/<timestamp>/ (the program and its signature);
  returns the folder. Written under a temporary name and renamed, so a
  reader never sees half of it.

  Raises:
    NonFiniteExportError: a weight is not finite; nothing is written.
  """
  divergence.check_export({v.path: np.asarray(v.value)
                           for v in model.variables})
  program = serving_program(model)
  base = os.path.join(model_dir, 'export')
  os.makedirs(base, exist_ok=True)
  stamp = int(time.time())
  while os.path.exists(os.path.join(base, str(stamp))):
    stamp += 1  # Two exports within a second.
  final = os.path.join(base, str(stamp))
  with atomic.temporary_path(final, directory=True) as folder:
    with open(os.path.join(folder, PROGRAM), 'wb') as f:
      f.write(program.serialize())
    with open(os.path.join(folder, SIGNATURE), 'w', encoding='utf-8') as f:
      json.dump({'inputs': {'image': ['batch', *model_lib.IMAGE_SHAPE,
                                      'uint8']},
                 'outputs': ['class_ids', 'probabilities'],
                 'platforms': list(program.platforms)}, f, indent=1)
  return final


def load(folder: str):
  """The exported predict function of an export folder: uint8 images ->
  {'class_ids', 'probabilities'} as numpy arrays."""
  with open(os.path.join(folder, PROGRAM), 'rb') as f:
    program = jax_export.deserialize(bytearray(f.read()))

  def predict(image: np.ndarray) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in program.call(
        np.asarray(image, np.uint8)).items()}

  return predict
