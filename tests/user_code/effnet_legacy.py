"""Legacy pair (e): a small EfficientNet-style TPUEstimator model, in the
manner of the TPU-era mobile image models, written for the tests.

What it keeps beyond its weights and slots is the point: an exponential
moving average of the weights and batch-norm statistics
(tf.train.ExponentialMovingAverage with num_updates, so its decay starts
at 2/11 and rises to 0.9999), evaluated and exported in place of the weights
through the EVAL and PREDICT scaffold_fn's Saver. Also: an inverted
bottleneck with a depthwise convolution, squeeze-and-excitation, swish,
drop connect, batch norm (momentum 0.99, epsilon 1e-3) through UPDATE_OPS,
RMSProp as TF 1 runs it (its mean square starting at 1, epsilon 1e-3),
label smoothing, L2 on every weight but batch norm's, a linear warmup from 0
then a staircase exponential decay, a host_call that logs the loss and the
rate, and a serving receiver that takes JPEG bytes.
"""
# migration-scan: skip-file (legacy code on purpose)
import os

import numpy as np
import tensorflow as tf

SIZE, CHANNELS, CLASSES = 16, 3, 5
STEM, EXPANDED, SQUEEZED, HEAD = 8, 16, 4, 16
BN_MOMENTUM, BN_EPSILON = 0.99, 1e-3
DROP_CONNECT, DROPOUT = 0.2, 0.2
LABEL_SMOOTHING, WEIGHT_DECAY = 0.1, 1e-5
EMA_DECAY = 0.9999
RMS_DECAY, RMS_MOMENTUM, RMS_EPSILON = 0.9, 0.9, 1e-3
MEAN, STDDEV = 128.0, 64.0
RECORDS = 'images.tfrecord'
v1 = tf.compat.v1


def _image(rng, label):
  """A 16x16 RGB image whose bright column says its class."""
  image = rng.integers(0, 120, (SIZE, SIZE, CHANNELS))
  image[:, 3 * label:3 * label + 2, :] += 120
  return image.astype(np.uint8)


def write_data(data_dir: str, examples: int = 320, seed: int = 0) -> None:
  """JPEG-encoded images and their labels, as a team's TFRecords."""
  rng = np.random.default_rng(seed)
  os.makedirs(data_dir, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(data_dir, RECORDS)) as writer:
    for _ in range(examples):
      label = int(rng.integers(CLASSES))
      encoded = tf.io.encode_jpeg(_image(rng, label), quality=95).numpy()
      feature = {
          'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[encoded])),
          'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(
              value=[label]))}
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def raw_image(encoded):
  """JPEG bytes to a float image of raw pixels (0 to 255), as
  tensorflow/tpu's EfficientNet feeds its model_fn."""
  image = tf.io.decode_jpeg(encoded, channels=CHANNELS)
  return tf.cast(tf.reshape(image, [SIZE, SIZE, CHANNELS]), tf.float32)


def preprocess(encoded):
  """JPEG bytes to a normalised float image."""
  return (raw_image(encoded) - MEAN) / STDDEV


def parse(record, image=preprocess):
  parsed = tf.io.parse_single_example(record, {
      'image/encoded': tf.io.FixedLenFeature([], tf.string),
      'image/class/label': tf.io.FixedLenFeature([], tf.int64)})
  return (image(parsed['image/encoded']),
          tf.cast(parsed['image/class/label'], tf.int32))


def parser(params):
  """parse, or with params['raw_pixels'] its images left unnormalised
  (the stem's batch-norm statistics then run into the thousands)."""
  if params.get('raw_pixels'):
    return lambda record: parse(record, raw_image)
  return parse


def input_fn(params):
  dataset = tf.data.TFRecordDataset(os.path.join(params['data_dir'], RECORDS))
  return dataset.map(parser(params)).batch(params['batch_size'],
                                           drop_remainder=True)


def serving_examples(params, count=64):
  """JPEG bytes from the team's records, for the serving receiver."""
  dataset = tf.data.TFRecordDataset(os.path.join(params['data_dir'], RECORDS))
  encoded = [tf.io.parse_single_example(r, {
      'image/encoded': tf.io.FixedLenFeature([], tf.string)})[
          'image/encoded'].numpy() for r in dataset.take(count)]
  return {'image_bytes': np.array(encoded, dtype=object)}


def _bn(net, training):
  return v1.layers.batch_normalization(net, momentum=BN_MOMENTUM,
                                       epsilon=BN_EPSILON, training=training)


def _conv(net, filters, kernel=1, use_bias=False):
  return v1.layers.conv2d(net, filters, kernel, padding='same',
                          use_bias=use_bias)


def _depthwise(net):
  with v1.variable_scope('depthwise'):
    kernel = v1.get_variable('depthwise_kernel', [3, 3, EXPANDED, 1])
  return tf.nn.depthwise_conv2d(net, kernel, [1, 1, 1, 1], 'SAME')


def _squeeze_excite(net):
  squeezed = tf.reduce_mean(net, [1, 2], keepdims=True)
  squeezed = tf.nn.swish(_conv(squeezed, SQUEEZED, use_bias=True))
  return net * tf.sigmoid(_conv(squeezed, EXPANDED, use_bias=True))


def _drop_connect(net, training):
  """Stochastic depth: the whole residual branch of an example dropped, in
  the form EfficientNet and MnasNet write it (no tf.nn.dropout: a uniform
  draw and a floor)."""
  if not training:
    return net
  survival = 1.0 - DROP_CONNECT
  batch = tf.shape(net)[0]
  binary = tf.floor(survival + v1.random_uniform([batch, 1, 1, 1],
                                                 dtype=net.dtype))
  return v1.div(net, survival) * binary


def network(images, training):
  net = tf.nn.swish(_bn(_conv(images, STEM, 3), training))
  shortcut = net
  net = tf.nn.swish(_bn(_conv(net, EXPANDED), training))
  net = tf.nn.swish(_bn(_depthwise(net), training))
  net = _squeeze_excite(net)
  net = _bn(_conv(net, STEM), training)
  net = _drop_connect(net, training) + shortcut
  net = tf.nn.swish(_bn(_conv(net, HEAD), training))
  net = tf.reduce_mean(net, [1, 2])
  net = v1.layers.dropout(net, DROPOUT, training=training)
  return v1.layers.dense(net, CLASSES)


def learning_rate(params, step):
  """A linear warmup from 0, then a staircase exponential decay."""
  step = tf.cast(step, tf.float32)
  warmup = float(params['warmup_steps'])
  decayed = params['learning_rate'] * tf.pow(
      0.97, tf.floor((step - warmup) / params['decay_steps']))
  return tf.where(step < warmup, params['learning_rate'] * step / warmup,
                  decayed)


def _averaged():
  """What the moving average covers: the weights and the batch-norm
  statistics."""
  return v1.trainable_variables() + [
      v for v in v1.global_variables() if 'moving_' in v.op.name]


def _restore_averages():
  ema = v1.train.ExponentialMovingAverage(EMA_DECAY)

  def scaffold_fn():
    return v1.train.Scaffold(
        saver=v1.train.Saver(ema.variables_to_restore(_averaged())))
  return scaffold_fn


def make_host_call_fn(summary_dir):
  """The host_call's function: the step's loss and rate, as summaries."""

  def host_call_fn(loss, learning_rate):
    writer = tf.summary.create_file_writer(summary_dir)
    with writer.as_default(step=v1.train.get_or_create_global_step()):
      tf.summary.scalar('loss', loss[0])
      tf.summary.scalar('learning_rate', learning_rate[0])
      return v1.summary.all_v2_summary_ops()
  return host_call_fn


def metric_fn(labels, logits):
  return {'top_1_accuracy': v1.metrics.accuracy(labels, tf.argmax(logits, 1))}


def model_fn(features, labels, mode, params):
  spec = v1.estimator.tpu.TPUEstimatorSpec
  training = mode == v1.estimator.ModeKeys.TRAIN
  if training and params.get('input_noise'):
    # Gaussian noise on the images, as a team might add it (a random op no
    # dropout form covers: the kit names it).
    features += v1.random_normal(tf.shape(features),
                                 stddev=params['input_noise'])
  logits = network(features, training)
  if mode == v1.estimator.ModeKeys.PREDICT:
    predictions = {'classes': tf.argmax(logits, 1, output_type=tf.int32),
                   'probabilities': tf.nn.softmax(logits)}
    return spec(mode, predictions=predictions,
                scaffold_fn=_restore_averages(), export_outputs={
                    'serving_default': tf.estimator.export.PredictOutput(
                        predictions)})
  onehot = tf.one_hot(labels, CLASSES)
  loss = v1.losses.softmax_cross_entropy(onehot, logits,
                                         label_smoothing=LABEL_SMOOTHING)
  loss += WEIGHT_DECAY * tf.add_n([
      tf.nn.l2_loss(v) for v in v1.trainable_variables()
      if 'batch_normalization' not in v.op.name])
  if mode == v1.estimator.ModeKeys.EVAL:
    return spec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]),
                scaffold_fn=_restore_averages())
  step = v1.train.get_global_step()
  rate = learning_rate(params, step)
  optimizer = v1.train.RMSPropOptimizer(rate, decay=RMS_DECAY,
                                        momentum=RMS_MOMENTUM,
                                        epsilon=RMS_EPSILON)
  if params['use_tpu']:
    optimizer = v1.tpu.CrossShardOptimizer(optimizer)
  with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
    train_op = optimizer.minimize(loss, step)
  ema = v1.train.ExponentialMovingAverage(EMA_DECAY, num_updates=step)
  with tf.control_dependencies([train_op]):
    train_op = ema.apply(_averaged())
  host_call = (make_host_call_fn(os.path.join(params['data_dir'],
                                              'summaries')),
               [tf.reshape(loss, [1]), tf.reshape(rate, [1])])
  return spec(mode, loss=loss, train_op=train_op, host_call=host_call)


def serving_input_receiver_fn():
  encoded = v1.placeholder(tf.string, [None], name='image_bytes')
  images = tf.map_fn(preprocess, encoded, fn_output_signature=tf.float32)
  # A tensor, not a dict: the model_fn takes the images as they are.
  return v1.estimator.export.TensorServingInputReceiver(
      images, {'image_bytes': encoded})
