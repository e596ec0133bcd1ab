"""Writes what TF 2.15 makes and the newest TensorFlow must take over:

  python tests/tf215_artifacts.py OUT_DIR      # on the estimator profile

OUT_DIR/estimator/        an Estimator model_dir after 30 steps;
OUT_DIR/port/             migrate's model_dir after 30 steps (Keras 2 layout);
OUT_DIR/wide_deep_<opt>/  a team port's checkpoint with Adam or momentum
                          slots and batch-norm statistics (Keras 2 layout);
OUT_DIR/bert.npz          a golden bundle of the BERT-shaped test pair (its
                          own optimizer, a warm start, 1 and 2 replicas);
OUT_DIR/bert_converted/   its TPUEstimator checkpoint after 5 steps, converted
                          here (Keras 2 layout, adam_m/adam_v slots carried);
OUT_DIR/kit_predictions.npz, OUT_DIR/bert_predictions.npz
                          the legacy predictions on estimator/ and
                          bert_estimator/ (--record_predictions), for --verify
                          of the JAX ports' conversions;
OUT_DIR/effnet.npz        a golden bundle of the EfficientNet-style test pair
                          (moving averages, RMSProp, a host_call, a JPEG
                          receiver; 1 and 2 replicas);
OUT_DIR/albert.npz        a golden bundle of the ALBERT-style test pair (LAMB,
                          a shared block, clipping at global norm 1.0, the
                          classifier's dropout masks; 3 steps, 1 and 2
                          replicas), for its PyTorch and JAX ports;
OUT_DIR/albert_estimator/, OUT_DIR/albert_predictions.npz
                          its TPUEstimator checkpoint after 3 steps, and what
                          it predicts (with each layer's output), for --verify
                          of its PyTorch port's conversion;
OUT_DIR/expected.npz      what each must give: predictions on fixed inputs,
                          and the wide-deep ports' weights, slots and steps.

tests/tools/test_across_versions.py reads OUT_DIR through $KIT_TF215_DIR (.ci/run
sets it). Each training runs as the command a user would run. The kit's own
bundle is in the repository (kit_pair/golden_bundle.npz, tests/kit_bundle.py).
"""
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [REPO, os.path.join(REPO, 'tests', 'user_code')]

from estimator_mnist import model as estimator_model  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import data  # pylint: disable=g-import-not-at-top,wrong-import-position
from migrate import model as model_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from migration_tools.pair import legacy  # pylint: disable=g-import-not-at-top,wrong-import-position
from migration_tools.pair import optimizers  # pylint: disable=g-import-not-at-top,wrong-import-position
from migration_tools.pair import port as port_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from mnist_common import prepare  # pylint: disable=g-import-not-at-top,wrong-import-position
from mnist_common import tfrecords  # pylint: disable=g-import-not-at-top,wrong-import-position
import albert_legacy  # pylint: disable=g-import-not-at-top,wrong-import-position
import bert_legacy  # pylint: disable=g-import-not-at-top,wrong-import-position
import effnet_legacy  # pylint: disable=g-import-not-at-top,wrong-import-position
import wide_deep_port  # pylint: disable=g-import-not-at-top,wrong-import-position

STEPS = 30
IMAGES = 64
WIDE_DEEP_STEPS = 5


def _run(*args: str) -> None:
  print('+', ' '.join(args), flush=True)
  subprocess.run([sys.executable, *args], cwd=REPO, check=True,
                 env={**os.environ, 'PYTHONPATH': os.pathsep.join(
                     [REPO, os.path.join(REPO, 'tests'),
                      os.path.join(REPO, 'tests', 'user_code')])})


BERT_PAIR = ['--legacy_model_fn=bert_legacy:model_fn',
             '--legacy_input_fn=bert_legacy:input_fn', '--port=bert_port:make_port']


def bert_params(data_dir: str) -> dict:
  """The BERT-shaped pair's params (tests/tools/test_user_pairs.py's)."""
  return {'data_dir': data_dir, 'learning_rate': 1e-3, 'num_train_steps': 20,
          'num_warmup_steps': 2,
          'init_checkpoint': os.path.join(data_dir, 'pretrained',
                                          'model.ckpt')}


def _bert(out: str) -> dict:
  """The BERT-shaped pair's bundle, its Estimator checkpoint converted, and
  what that checkpoint predicts."""
  data_dir = os.path.join(out, 'bert_data')
  bert_legacy.write_data(data_dir)
  params = bert_params(data_dir)
  _run('-m', 'migration_tools.compare', *BERT_PAIR,
       '--legacy_serving_input_fn=bert_legacy:serving_input_receiver_fn',
       f'--params={json.dumps(params)}', '--batch_size=16', '--steps=6',
       '--replicas=1,2', '--eval_batches=4', f'--record_bundle={out}/bert.npz',
       f'--report={out}/bert_live.json')
  _run(os.path.join(REPO, 'tests', 'user_code', 'estimator_train.py'),
       '--pair_module=bert_legacy', f'--estimator_dir={out}/bert_estimator',
       f'--pair_params={json.dumps(params)}', '--train_steps=5',
       '--global_batch=16')
  _run('-m', 'migration_tools.checkpoint', *BERT_PAIR,
       f'--estimator_dir={out}/bert_estimator',
       f'--output={out}/bert_converted', f'--params={json.dumps(params)}',
       '--verify', '--verify_examples=64')
  _run('-m', 'migration_tools.checkpoint', *BERT_PAIR[:2],
       f'--estimator_dir={out}/bert_estimator',
       f'--params={json.dumps(params)}', '--verify_examples=64',
       f'--record_predictions={out}/bert_predictions.npz')
  features = next(iter(bert_legacy.input_fn({**params, 'batch_size': 8})))
  features = {k: v.numpy() for k, v in features.items()}
  expected = {f'bert_features/{k}': v for k, v in features.items()}
  expected['bert_probabilities'] = legacy.predict(
      bert_legacy.model_fn, tf.train.latest_checkpoint(
          f'{out}/bert_estimator'), features,
      legacy.model_params(params, 8))['probabilities']
  return expected


EFFNET_PAIR = ['--legacy_model_fn=effnet_legacy:model_fn',
               '--legacy_input_fn=effnet_legacy:input_fn',
               '--legacy_serving_input_fn=effnet_legacy:serving_input_receiver_fn',
               '--legacy_serving_inputs=effnet_legacy:serving_examples',
               '--port=effnet_port:make_port']


def effnet_params(data_dir: str) -> dict:
  """The EfficientNet-style pair's params (tests/tools/test_user_pairs.py's)."""
  return {'data_dir': data_dir, 'learning_rate': 0.05, 'warmup_steps': 2,
          'decay_steps': 2}


def _effnet(out: str) -> None:
  """The EfficientNet-style pair's bundle."""
  data_dir = os.path.join(out, 'effnet_data')
  effnet_legacy.write_data(data_dir)
  _run('-m', 'migration_tools.compare', *EFFNET_PAIR,
       f'--params={json.dumps(effnet_params(data_dir))}', '--batch_size=32',
       '--steps=6', '--replicas=1,2', '--eval_batches=4',
       f'--record_bundle={out}/effnet.npz', f'--report={out}/effnet_live.json')


def albert_params(data_dir: str) -> dict:
  """The ALBERT-style pair's params (tests/tools/test_user_pairs.py's)."""
  return {'data_dir': data_dir, 'learning_rate': 1e-3, 'num_train_steps': 20,
          'num_warmup_steps': 2}


def _albert(out: str) -> None:
  """The ALBERT-style pair's bundle, at the defaults (weights of 0.02, where
  the clip engages at no recorded step: the clipping check's state is
  recorded too)."""
  data_dir = os.path.join(out, 'albert_data')
  os.makedirs(data_dir)
  albert_legacy.write_data(data_dir)
  _run('-m', 'migration_tools.compare',
       '--legacy_model_fn=albert_legacy:model_fn',
       '--legacy_input_fn=albert_legacy:input_fn',
       '--legacy_serving_input_fn=albert_legacy:serving_input_receiver_fn',
       '--port=albert_port:make_port',
       f'--params={json.dumps(albert_params(data_dir))}', '--batch_size=16',
       '--steps=3', '--replicas=1,2', '--eval_batches=4', '--notpu_ready',
       f'--record_bundle={out}/albert.npz',
       f'--report={out}/albert_live.json')
  _run(os.path.join(REPO, 'tests', 'user_code', 'estimator_train.py'),
       '--pair_module=albert_legacy', f'--estimator_dir={out}/albert_estimator',
       f'--pair_params={json.dumps(albert_params(data_dir))}',
       '--train_steps=3', '--global_batch=16')
  _run('-m', 'migration_tools.checkpoint',
       '--legacy_model_fn=albert_legacy:model_fn',
       '--legacy_input_fn=albert_legacy:input_fn',
       f'--estimator_dir={out}/albert_estimator',
       f'--params={json.dumps(albert_params(data_dir))}',
       '--verify_examples=32',
       f'--record_predictions={out}/albert_predictions.npz')


def test_images(count: int) -> np.ndarray:
  """The first `count` raw test images of the kit's default data."""
  info = prepare.prepare(None)
  records = tf.data.TFRecordDataset(info.path('test')).take(count).map(
      tfrecords.parse_example).batch(count)
  return next(iter(records))[0].numpy()


def _wide_deep(out: str, optimizer: str) -> dict:
  """Trains the team port a few steps with fit; returns what must carry."""
  params = {'optimizer': optimizer}
  tf.keras.utils.set_random_seed(0)
  model = wide_deep_port.build_model(params)
  model.compile(wide_deep_port.make_optimizer(params),
                tf.keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  features, labels = wide_deep_port.examples(16 * WIDE_DEEP_STEPS)
  model.fit(features, labels, batch_size=16, epochs=1, verbose=0)
  checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
  tf.train.CheckpointManager(checkpoint, os.path.join(
      out, f'wide_deep_{optimizer}'), 1).save(
          checkpoint_number=WIDE_DEEP_STEPS)
  state = port_lib.state_variables(model)
  slots = optimizers.port_slots(model.optimizer, {n: n for n in state})
  probe, _ = wide_deep_port.examples(32, seed=1)
  prefix = f'wide_deep_{optimizer}'
  expected = {f'{prefix}/weight/{name}': v.numpy()
              for name, v in state.items()}
  expected.update({f'{prefix}/slot/{name}/{slot}': v.numpy()
                   for (name, slot), v in slots.items()})
  expected[f'{prefix}/step'] = np.int64(model.optimizer.iterations.numpy())
  expected[f'{prefix}/predictions'] = model(probe, training=False).numpy()
  return expected


def main(out: str) -> None:
  os.makedirs(out, exist_ok=True)
  _run('-m', 'estimator_mnist', f'--model_dir={out}/estimator',
       f'--train_steps={STEPS}', '--batch_size=64', '--noenable_predict',
       '--eval_steps=0')
  _run('-m', 'migration_tools.checkpoint', f'--estimator_dir={out}/estimator',
       f'--record_predictions={out}/kit_predictions.npz')
  _run('-m', 'migrate', '--loop=custom', f'--model_dir={out}/port',
       f'--train_steps={STEPS}', '--batch_size=64', '--noenable_predict',
       '--eval_steps=0')
  images = test_images(IMAGES)
  scaled = data.scale_image(images).numpy()
  expected = {'images': images}
  expected['estimator_probabilities'] = legacy.predict(
      estimator_model.model_fn, tf.train.latest_checkpoint(
          f'{out}/estimator'), scaled,
      {'learning_rate': 0.05, 'batch_size': IMAGES, 'use_tpu': False}
  )['probabilities']
  port = model_lib.build_model()
  tf.train.Checkpoint(model=port).restore(
      tf.train.latest_checkpoint(f'{out}/port')).expect_partial()
  expected['port_probabilities'] = tf.nn.softmax(
      port(scaled, training=False)).numpy()
  for optimizer in ('adam', 'momentum'):
    expected.update(_wide_deep(out, optimizer))
  expected.update(_bert(out))
  _effnet(out)
  _albert(out)
  np.savez(os.path.join(out, 'expected.npz'), **expected)
  with open(os.path.join(out, 'versions.json'), 'w', encoding='utf-8') as f:
    json.dump({'tensorflow': tf.__version__}, f)
  print(f'TF {tf.__version__} artifacts in {out}')


if __name__ == '__main__':
  if len(sys.argv) != 2:
    sys.exit('usage: python tests/tf215_artifacts.py OUT_DIR')
  main(sys.argv[1])
