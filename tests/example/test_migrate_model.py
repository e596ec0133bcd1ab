"""The migrated model, loss, optimizer and input pipeline, piece by piece."""
import numpy as np
import pytest
import tensorflow as tf

from conftest import cpu_strategy
from kit_core import cpu
from kit_core import keras_compat
from kit_core import sharding
from kit_core.errors import KitError
from migrate import custom_loop
from migrate import data
from migrate import fit_loop
from migrate import model
from mnist_common import batching


def _estimator_variables():
  from estimator_mnist import model as estimator_model  # pylint: disable=g-import-not-at-top
  with tf.Graph().as_default():
    estimator_model.build_network(tf.zeros([1, 28, 28, 1]), training=False)
    return {v.op.name: v.shape.as_list()
            for v in tf.compat.v1.trainable_variables()}


@pytest.mark.estimator
def test_variables_map_one_to_one_onto_the_estimator_checkpoint():
  keras = {keras_compat.variable_path(v): v.shape.as_list()
           for v in model.build_model().trainable_variables}
  assert keras == _estimator_variables()


def test_layers_and_activations_match_the_estimator():
  net = model.build_model()
  kinds = [(type(layer).__name__, getattr(layer, 'activation', None))
           for layer in net.layers[1:]]
  relu = tf.keras.activations.relu
  linear = tf.keras.activations.linear
  assert [k for k, _ in kinds] == ['Conv2D', 'MaxPooling2D', 'Conv2D',
                                   'MaxPooling2D', 'Flatten', 'Dense',
                                   'Dropout', 'Dense']
  assert [a for _, a in kinds if a is not None] == [relu, relu, relu, linear]
  assert net.get_layer('dropout').rate == 0.4


def test_loss_equals_the_estimator_loss():
  rng = np.random.RandomState(0)
  logits = tf.constant(rng.randn(16, 10), tf.float32)
  labels = tf.constant(rng.randint(0, 10, 16), tf.int32)
  ours = tf.reduce_mean(model.per_example_loss(labels, logits))
  theirs = tf.compat.v1.losses.softmax_cross_entropy(
      tf.one_hot(labels, 10), logits)
  assert float(ours) == float(theirs)
  # Keras fit hands labels in as [batch, 1]; the loss must not change.
  np.testing.assert_array_equal(
      model.per_example_loss(labels[:, None], logits),
      model.per_example_loss(labels, logits))


def _batch(size: int, seed: int = 0):
  rng = np.random.RandomState(seed)
  images = rng.uniform(-0.5, 0.5, (size, 28, 28, 1)).astype(np.float32)
  return images, rng.randint(0, 10, size).astype(np.int32)


@pytest.mark.parametrize('gate', [True, False])
def test_gradients_are_the_tape_gradients(gate):
  net = model.build_model(dropout_rate=0.0)
  images, labels = _batch(32)

  def loss():
    return tf.reduce_mean(model.per_example_loss(
        labels, net(images, training=True)))

  @tf.function
  def both():
    with tf.GradientTape() as tape:
      taped = loss()
    return (model.gradients(loss(), net.trainable_variables, gate),
            tape.gradient(taped, net.trainable_variables))

  ours, tape = both()
  assert len(ours) == len(tape) == 8
  for variable, a, b in zip(net.trainable_variables, ours, tape):
    # oneDNN may run the two through different kernels: rounding only.
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7,
                               err_msg=variable.name)


@pytest.mark.parametrize('amx, bfloat16_gated',
                         [(False, True), (None, True), (True, False)])
def test_gradients_are_gated_except_in_bfloat16_with_amx(monkeypatch, amx,
                                                         bfloat16_gated):
  """Measured: gated gradients are faster in float32 on every CPU, ungated
  ones in bfloat16 with AMX (benchmarks/README.md); unknown CPUs are gated."""
  monkeypatch.setattr(cpu, 'has_amx_bfloat16', lambda: amx)
  assert model.gates_gradients('float32') is True
  assert model.gates_gradients('mixed_bfloat16') is bfloat16_gated
  assert model.build_model().gate_gradients is True
  assert model.build_model(
      precision='mixed_bfloat16').gate_gradients is bfloat16_gated


@pytest.mark.parametrize('loop', ['fit', 'custom'])
def test_both_loops_take_the_models_gating(monkeypatch, loop):
  """The step hands model_lib.gradients the model's gate_gradients."""
  gates = []
  taken = model.gradients

  def spied(loss, variables, gate=True):
    gates.append(gate)
    return taken(loss, variables, gate)

  monkeypatch.setattr(model, 'gradients', spied)
  strategy = cpu_strategy(1)
  with strategy.scope():
    net = model.build_model(dropout_rate=0.0)
    optimizer = model.make_optimizer(0.1)
  net.gate_gradients = False
  images, labels = _batch(8)
  dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)
  if loop == 'fit':
    fit_loop.compile_model(net, optimizer, 1)
    net.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
  else:
    trainer = custom_loop.Trainer(net, optimizer, strategy, 8)
    trainer.train_steps(iter(strategy.experimental_distribute_dataset(
        dataset.repeat())), tf.constant(1))
  assert int(optimizer.iterations.numpy()) == 1
  assert gates and set(gates) == {False}


@pytest.mark.parametrize('steps_per_execution', [1, 3])
def test_fit_step_is_keras_own_step_on_two_replicas(steps_per_execution):
  """Classifier.train_step (gated gradients) against Keras's default step
  (a tape) in a plain Model at one step per execution: same loss scaling
  under the strategy, same updates, same logged loss. At 3 steps per
  execution on Keras 3, Classifier runs its own multi-step function
  (keras-team/keras#19246)."""
  strategy = cpu_strategy(2)
  batches = [_batch(64, seed=seed) for seed in (1, 2, 3)]
  dataset = tf.data.Dataset.from_tensor_slices(
      tuple(np.concatenate(parts) for parts in zip(*batches))).batch(64)
  weights, results = None, []
  for plain in (False, True):
    with strategy.scope():
      net = model.build_model(dropout_rate=0.0)
      if plain:
        net = tf.keras.Model(net.inputs, net.outputs)
      weights = weights or net.get_weights()
      net.set_weights(weights)
      net.compile(optimizer=model.make_optimizer(0.5),
                  loss=model.per_example_loss, metrics=['accuracy'],
                  steps_per_execution=1 if plain else steps_per_execution)
    history = net.fit(dataset.repeat(), epochs=1, steps_per_epoch=3,
                      verbose=0)
    assert int(net.optimizer.iterations.numpy()) == 3
    results.append((net.get_weights(), history.history['loss'][0]))
  (ours, our_loss), (keras, keras_loss) = results
  assert not isinstance(net, model.Classifier)
  assert our_loss > 0.1  # The mean loss of 3 steps, not a tracker left at 0.
  assert our_loss == pytest.approx(keras_loss, rel=1e-6)
  # The same updates, held relative to their size: a scaling bug (a loss
  # averaged per replica) doubles them, a lost gradient zeroes them. Not to
  # the bit: on an AVX-512 EPYC with oneDNN's kernels, in 2 of about 12 runs
  # of the fast tier, two replicas in one process ended these three steps at
  # rate 0.5 apart by up to 4% of an update in a single element.
  for before, a, b in zip(weights, ours, keras):
    update = np.linalg.norm(b - before)
    assert update > 0
    assert np.linalg.norm(a - b) <= 0.1 * update


def test_mixed_bfloat16_has_the_float32_variables_and_logits():
  legacy_like = model.build_model(dropout_rate=0.0)
  mixed = model.build_model(dropout_rate=0.0, precision='mixed_bfloat16')
  assert [(v.name, v.dtype) for v in mixed.variables] == [
      (v.name, v.dtype) for v in legacy_like.variables]
  # Keras 3 gives dtypes as strings, Keras 2 as tf.DType.
  assert {tf.as_dtype(v.dtype) for v in mixed.variables} == {tf.float32}
  for name in ('conv1', 'pool1', 'conv2', 'pool2', 'dense'):
    assert mixed.get_layer(name).compute_dtype == 'bfloat16', name
  assert mixed.get_layer('logits').compute_dtype == 'float32'
  # The same weights load into either (the checkpoints are the same); the
  # outputs differ by bfloat16 rounding only.
  mixed.set_weights(legacy_like.get_weights())
  images, _ = _batch(16)
  ours, theirs = mixed(images), legacy_like(images)
  assert ours.dtype == tf.float32
  np.testing.assert_allclose(ours, theirs, atol=0.05)
  assert not np.array_equal(ours, theirs)
  with pytest.raises(ValueError, match='precision'):
    model.build_model(precision='float16')


def test_learning_rate_decays_once_per_optimizer_step():
  schedule = model.learning_rate_schedule(0.05)
  assert float(schedule(0)) == pytest.approx(0.05)
  assert float(schedule(50000)) == pytest.approx(0.05 * 0.96 ** 0.5)
  # The optimizer steps the schedule once per apply_gradients.
  strategy = cpu_strategy(2)
  with strategy.scope():
    optimizer = model.make_optimizer(0.05)
    weight = tf.Variable(1.0)
  optimizer.iterations.assign(50000)
  strategy.run(lambda: optimizer.apply_gradients([(tf.constant(0.0), weight)]))
  assert int(optimizer.iterations.numpy()) == 50001  # Once, not per replica.
  assert float(optimizer.learning_rate.numpy()) == pytest.approx(
      0.05 * 0.96 ** 0.5)


def test_per_replica_batch_arithmetic():
  assert sharding.per_replica_batch(1024, 8, '--num_shards') == 128
  with pytest.raises(KitError, match=r'--batch_size=1000 is not divisible by '
                     r'the number of replicas=3'):
    sharding.per_replica_batch(1000, 3, 'the number of replicas')
  # Eval batches shrink to small test splits but stay whole per replica.
  assert batching.eval_batch_size(1024, 497, 1) == 497
  assert batching.eval_batch_size(1024, 497, 8) == 496
  assert batching.eval_batch_size(1024, 10000, 8) == 1024


@pytest.mark.parametrize('replicas', [1, 2, 4])
def test_each_replica_gets_its_share_of_the_global_batch(fake_data_dir,
                                                          replicas):
  strategy = cpu_strategy(replicas)
  dataset = data.distribute(strategy, fake_data_dir.data_dir, 'train', 64,
                            training=True)
  images, labels = next(iter(dataset))
  local = strategy.experimental_local_results(images)
  assert len(local) == replicas
  assert all(part.shape == (64 // replicas, 28, 28, 1) for part in local)
  assert strategy.experimental_local_results(labels)[0].shape == (
      64 // replicas,)


def test_input_pipelines_read_disjoint_shards(fake_data_dir):
  def labels_of(pipeline_id):
    context = tf.distribute.InputContext(num_input_pipelines=2,
                                         input_pipeline_id=pipeline_id,
                                         num_replicas_in_sync=2)
    dataset = data.make_dataset(fake_data_dir.data_dir, 'test', 1, False,
                                input_context=context)
    return [tuple(img.numpy().ravel()[:50]) for img, _ in dataset]

  first, second = labels_of(0), labels_of(1)
  assert len(first) == len(second) == 256  # 512 test examples, halved.
  assert not set(first) & set(second)


def test_images_are_scaled_like_the_estimator(fake_data_dir):
  images, _ = next(iter(data.make_dataset(fake_data_dir.data_dir, 'train', 256,
                                          True)))
  assert float(tf.reduce_min(images)) == -0.5
  assert float(tf.reduce_max(images)) == 0.5
