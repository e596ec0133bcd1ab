"""The scanner's rules, as data: one row per legacy construct.

A row says what it matches, how bad it is, what it becomes and which section
of docs/MIGRATION.md explains it. The engine (engine.py) knows nothing of
TensorFlow beyond this table and the generated tf_api.py. To add a rule, add
a row here and a line to tests/tools/test_scan.py's RULE_CASES.

``match`` is one of:
  api:PATH       the TF API symbol PATH (its path inside ``tf``, with imports,
                 aliases and tf.compat.v1 resolved), and its attributes;
  api:PATH.*     PATH and everything under it;
  api:*.NAME     any legacy TF path ending in NAME (tf.contrib.tpu.X,
                 tf.estimator.tpu.X, tensorflow_estimator...X);
  keyword:NAME   a keyword argument NAME= in a call of a TensorFlow API
                 (imports resolved) or of ESTIMATOR_CALLEES by name (a
                 wrapped TPUEstimatorSpec(...), estimator.train(...)): never
                 dict(NAME=...) or the user's own functions;
  arg:PATH:N     a call of PATH with more than N positional arguments;
  arg:PATH:NAME  a call of PATH with the keyword argument NAME=;
  input_fn-call:M1|M2:KW,...  a call of a method M1 or M2 given an input_fn
                 (by keyword, or positionally a name ending in input_fn or a
                 lambda), with no keyword but KW, ... and no other function;
  method:NAME    a call of a method NAME on any object (``.NAME(``);
  attribute:N1|N2  an attribute N1 or N2 of any object (``.N1``);
  method-arg:NAME:KEYWORD  a call of a method NAME with KEYWORD=;
  method-arg:NAME:N:TF1:TF2  a call of a method NAME with more than N
                 positional arguments, the N+1th read as TF 1's parameter
                 TF1 or TF 2's TF2, which may list names as A|B
                 (shapes.lean; open: review);
  shape-attribute:NAME  ``.NAME`` of an indexed shape (x.shape[i].NAME,
                 x.get_shape()[i].NAME, input_shape[i].NAME);
  wrapper:SEGMENT  ``w().attr`` where w, not TensorFlow, has a segment
                 SEGMENT (contrib.tpu().TPUEstimator): named once per file
                 and wrapper;
  subscript:KEY  ``params['KEY']`` inside a model_fn or an input_fn: a
                 function that takes params and features and mode, is
                 named *model_fn or *input_fn, or is handed to
                 model_fn=/input_fn= or to one of ESTIMATOR_CALLEES;
  import:MODULE  an import of MODULE (MODULE.* for it and under it).
PATH segments may hold shell wildcards (train.*Optimizer) and alternatives
(image.resize_area|resize_bicubic). The first row
that matches wins, so specific rows come before general ones. An api row
only fires on a legacy path: a symbol TF 2 has unchanged under the same name
(tf_api.py) is never a finding, unless the row is a STYLE note. A symbol with no row gets
one of the generated rules at the end, from tf_api.py.
"""
import dataclasses

# How bad a finding is; SARIF levels in parentheses.
BREAKS = 'breaks'  # (error) fails on TF 2: gone, or an argument TF 2 refuses.
SILENT = 'silent'  # (error) runs on TF 2 but computes something else.
# (warning) a symbol TF 2 redefined, called so that the call alone cannot
# say which TensorFlow it was written for: read it (shapes.py).
REVIEW = 'review'
COMPAT = 'compat'  # (warning) runs through tf.compat.v1 until that goes.
STYLE = 'style'  # (note) works; cleaner the TF 2 way.
SEVERITIES = (SILENT, BREAKS, REVIEW, COMPAT, STYLE)  # Most severe first.
SARIF_LEVEL = {BREAKS: 'error', SILENT: 'error', REVIEW: 'warning',
               COMPAT: 'warning', STYLE: 'note'}

# What decides a call the call's shape leaves open, per row: the first of
# the row's file marks the file holds, else the row's own default.
TF1_SHAPE, TF2_SHAPE = 'tf1', 'tf2'

# Groups for the report's plan and the corpus's recall and precision.
CATEGORIES = {
    'tpu-estimator': 'TPUEstimator and its configuration',
    'estimator': 'tf.estimator',
    'contrib': 'tf.contrib',
    'graph': 'TF 1 graph mode: sessions, variables, collections',
    'io': 'files, records and input pipelines',
    'train-layers': 'tf.train optimizers and schedules, tf.layers, v1 losses '
                    'and metrics',
    'summaries': 'v1 summaries',
    'flags-logging': 'tf.flags, tf.app, tf.logging',
    'silent': 'silent meaning changes',
    'tf1-api': 'other TF 1 symbols',
    'compat': 'tf.compat.v1',
}


@dataclasses.dataclass(frozen=True)
class Rule:
  """One legacy construct.

  Attributes:
    id: stable identifier (SARIF ruleId).
    match: what it matches (see the module docstring).
    category: a key of CATEGORIES.
    severity: for the plain TF 1 spelling run on TF 2 (``import tensorflow
      as tf``); see severity_via for tf.compat.v1.
    construct: what the user reads.
    becomes: what to write instead.
    section: the anchor of the section of docs/MIGRATION.md.
    title: what the rule finds, where construct is a template.
    step: the plan's step (see below).
    mechanical: the kind of a mechanical rename, for the plan.
    undecided: for a symbol TF 2 redefined, spelt plain tf.X, called in a
      way that binds to both signatures: TF1_SHAPE reports it at severity,
      TF2_SHAPE not at all, REVIEW as a review. The call alone decides,
      with what lexically encloses it: never the rest of the file.
    enclosing: (mark, TF1_SHAPE | TF2_SHAPE | REVIEW) pairs that decide
      such a call by a statement around it, the first that holds:
      ``with:NAME:KEYWORD`` (inside ``with x.NAME(KEYWORD=...)``, e.g. a
      writer's as_default(step=...)), ``decorator:PATH`` (inside a function
      decorated with tf.PATH, e.g. tf.function).
  """
  id: str
  match: str
  category: str
  severity: str
  construct: str
  becomes: str
  section: str
  title: str = ''  # For a generated rule, whose construct is a template.
  undecided: str = REVIEW
  enclosing: tuple[tuple[str, str], ...] = ()
  # The plan's step: 1, what stops the code running on TF 2.15 at all, even
  # through tf.compat.v1 (tf.contrib, Dimension.value); 2, leaving
  # tf.compat.v1.
  step: int = 2
  # For a rename any tool can do (tf.gfile -> tf.io.gfile): its kind, one
  # line of the plan for all of them.
  mechanical: str = ''
  # TF 2 has a symbol of this name that means something else: through
  # tf.compat.v1 the name is TF 1's own and computes what it did, so what
  # is silent spelt plain tf.X only warns there (a v1 summary under
  # ``import tensorflow.compat.v1 as tf``).
  redefined: bool = False
  # ((keyword, position), ...): a call that passes each of these
  # arguments, by keyword or as positional argument position (0-based), is
  # not this row's; the next row that matches decides
  # (AdamOptimizer(lr, epsilon=1e-6) keeps its epsilon: no longer silent,
  # but still a v1 optimizer). A reference not called there is for review:
  # its call decides.
  unless_given: tuple[tuple[str, int], ...] = ()

  @property
  def description(self) -> str:
    return self.title or self.construct

  def severity_via(self, compat_v1: bool) -> str:
    """The severity of a use through a tf.compat.v1 that still has it:
    what would break only warns; what is silent stays so, unless TF 2 only
    redefined the name (Rule.redefined)."""
    if compat_v1 and (self.severity == BREAKS or
                      self.redefined and self.severity == SILENT):
      return COMPAT
    return self.severity


# Guide sections (anchors of docs/MIGRATION.md's '## ' headings).
_MODEL_FN = 'tpuestimator-model_fn-and-input_fn'
_BATCH = 'paramsbatch_size-global-and-per-replica-batch'
_CONFIG = 'runconfig-tpuconfig-and-iterations_per_loop'
_CROSS_SHARD = 'crossshardoptimizer-and-loss-scaling'
_OPTIMIZERS = 'tfcompatv1train-optimizers-and-layers'
_METRICS = 'eval_metrics-and-metric_fn'
_SUMMARIES = 'host_call-and-summaries'
_CHECKPOINTS = 'scaffold_fn-warm-start-and-checkpoints'
_EXPORT = 'export_saved_model'
_TPU = 'tpuclusterresolver-and-tpu-initialisation'
_HOOKS = 'hooks-and-callbacks'
_TRAIN_AND_EVALUATE = 'train_and_evaluate'
_ABSL = 'tfflags-tfapp-tflogging'
_SESSIONS = 'sessions-and-placeholders'
_GRAPH = 'variables-collections-and-gradients'
_IO = 'files-records-and-input-pipelines'
_CONTRIB = 'tfcontrib'
_SILENT = 'silent-meaning-changes'
_TF1 = 'other-tf-1-symbols'

_KERAS_SAVES_IT = ('a Keras callback, or code in your own loop')
# A v1 summary call has no step: one that passes none is read as v1, unless
# it stands inside a writer's as_default(step=...). TF 2 code that relies on
# tf.summary.experimental.set_step elsewhere is told apart once it passes
# step= (the rest of the file never decides).
_SUMMARY_SHAPE = dict(undecided=TF1_SHAPE,
                      enclosing=(('with:as_default:step', TF2_SHAPE),),
                      redefined=True)
_V1_LOSS = ('tf.keras.losses with reduction NONE, averaged over the global '
            'batch (tf.nn.compute_average_loss): TF 1 losses reduce by '
            'SUM_BY_NONZERO_WEIGHTS and add to a collection')

_ROWS = (
    # Silent meaning changes: the line still runs on TF 2. First: a row that
    # matches wins, so the specific come before the general.
    Rule('summary-op', 'api:summary.scalar', 'silent', SILENT,
         'tf.summary.scalar (v1)', "TF 2's tf.summary.scalar(name, data, "
         'step) writes only under a default writer and returns False '
         'without one: a v1 summary op silently records nothing',
         _SUMMARIES, **_SUMMARY_SHAPE),
    Rule('summary-histogram', 'api:summary.histogram', 'silent', SILENT,
         'tf.summary.histogram (v1)', "TF 2's tf.summary.histogram needs a "
         'default writer and a step, or silently records nothing',
         _SUMMARIES, **_SUMMARY_SHAPE),
    Rule('summary-image', 'api:summary.image', 'silent', SILENT,
         'tf.summary.image (v1)', "TF 2's tf.summary.image needs a default "
         'writer and a step, or silently records nothing', _SUMMARIES,
         **_SUMMARY_SHAPE),
    Rule('where-broadcast', 'arg:where:2', 'silent', REVIEW,
         'tf.where(cond, x, y)', "TF 2's tf.where broadcasts cond, x and y "
         "(TF 1's where_v2); TF 1's needs x and y of one shape, with cond of "
         'that shape or a vector that picks rows: check that the shapes '
         'select what you meant, or keep TF 1\'s with tf.compat.v1.where',
         _SILENT, redefined=True),
    Rule('ctc-loss-positional', 'arg:nn.ctc_loss:2', 'silent', SILENT,
         'tf.nn.ctc_loss argument 3', "TF 1's third argument is "
         "sequence_length (the logits' lengths), TF 2's is label_length; TF 2 "
         'also needs logit_length and takes class 0 as the blank where TF 1 '
         'took the last: call tf.nn.ctc_loss(labels=, logits=, label_length=, '
         'logit_length=, blank_index=-1) by keyword (inputs and logits are '
         'one argument in TF 1: the second position did not move)', _SILENT,
         redefined=True),
    Rule('dropout-positional', 'arg:nn.dropout:1', 'silent', SILENT,
         'tf.nn.dropout(x, keep_prob)', "TF 2's second argument is rate = "
         '1 - keep_prob: write tf.nn.dropout(x, rate=1 - keep_prob), or a '
         'Keras Dropout layer', _SILENT, redefined=True),
    Rule('dropout-keep-prob', 'arg:nn.dropout:keep_prob', 'silent', BREAKS,
         'tf.nn.dropout(keep_prob=)', 'tf.nn.dropout(x, rate=1 - keep_prob) '
         '(TF 2 refuses keep_prob=)', _SILENT),
    Rule('losses-mse-v1', 'api:losses.mean_squared_error', 'silent', SILENT,
         'tf.losses.mean_squared_error (v1)', "TF 2's function takes "
         '(y_true, y_pred) and returns one loss per example, not the '
         'weighted scalar mean: ' + _V1_LOSS, _SILENT, redefined=True),
    # NONE, SUM and SUM_OVER_BATCH_SIZE mean what Keras's do: only TF 1's
    # own reductions are a finding of their own (the rest is tf.losses').
    Rule('losses-reduction-v1', 'api:losses.Reduction.SUM_BY_NONZERO_WEIGHTS|'
         'SUM_OVER_NONZERO_WEIGHTS|MEAN', 'train-layers', BREAKS,
         'tf.losses.Reduction (v1)', 'TF 2 has no SUM_BY_NONZERO_WEIGHTS '
         '(nor MEAN): a Keras loss with reduction NONE, its sum divided by '
         'the count of nonzero weights, or by the global batch '
         '(tf.nn.compute_average_loss) where every weight is 1', _CROSS_SHARD),
    Rule('batch-norm-v1', 'api:layers.batch_normalization', 'silent',
         SILENT, 'tf.layers.batch_normalization', 'tf.keras.layers.'
         'BatchNormalization, called with training=: the v1 layer only '
         'updates its moving averages through UPDATE_OPS, which TF 2 code '
         'never runs', _SILENT),
    Rule('batch-norm-layer-v1', 'api:layers.BatchNormalization', 'silent',
         SILENT, 'tf.layers.BatchNormalization', 'tf.keras.layers.'
         'BatchNormalization, called with training=: the v1 layer only '
         'updates its moving averages through UPDATE_OPS', _SILENT),
    # Given epsilon, the port copies it: a v1 optimizer like any other.
    Rule('adam-epsilon', 'api:train.AdamOptimizer', 'silent', SILENT,
         'tf.train.AdamOptimizer', 'tf.keras.optimizers.Adam(epsilon=1e-8): '
         "Keras's default epsilon is 1e-7, TF 1's 1e-8", _SILENT,
         unless_given=(('epsilon', 3),)),
    Rule('rmsprop-epsilon', 'api:train.RMSPropOptimizer', 'silent', SILENT,
         'tf.train.RMSPropOptimizer', 'tf.keras.optimizers.RMSprop('
         'rho=0.9, epsilon=1e-10): Keras defaults to epsilon 1e-7, and TF 1 '
         'adds epsilon inside the square root', _SILENT,
         unless_given=(('epsilon', 3),)),
    # Its epsilon given, the update still differs: Keras's mean square
    # starts at 0.
    Rule('rmsprop-update', 'api:train.RMSPropOptimizer', 'silent', SILENT,
         'tf.train.RMSPropOptimizer(epsilon=...)', 'migration_tools.tf1_keras.'
         'optimizers.RMSpropFromOnes(rho=decay, momentum=..., epsilon=the '
         'same): TF 1 starts its mean square at 1, Keras\'s RMSprop at 0, so '
         'with the same epsilon it steps otherwise', _SILENT),
    # TF 2's tf.random_*_initializer are Keras's, with Keras's scale.
    Rule('random-normal-initializer', 'api:random_normal_initializer',
         'silent', SILENT,
         'tf.random_normal_initializer()', 'tf.random_normal_initializer('
         'stddev=1.0): TF 1 defaults to stddev 1.0, TF 2 to 0.05', _SILENT,
         redefined=True, unless_given=(('stddev', 1),)),
    Rule('random-uniform-initializer', 'api:random_uniform_initializer',
         'silent', SILENT,
         'tf.random_uniform_initializer()', 'tf.random_uniform_initializer('
         'minval=0.0, maxval=1.0): TF 1 draws from [0, 1) by default, TF 2 '
         'from [-0.05, 0.05)', _SILENT, redefined=True,
         unless_given=(('minval', 0), ('maxval', 1))),
    Rule('adagrad-epsilon', 'api:train.AdagradOptimizer', 'silent', SILENT,
         'tf.train.AdagradOptimizer', 'tf.keras.optimizers.Adagrad(epsilon='
         '...): TF 1 adds no epsilon, Keras 1e-7', _SILENT),
    Rule('adadelta-epsilon', 'api:train.AdadeltaOptimizer', 'silent', SILENT,
         'tf.train.AdadeltaOptimizer', 'tf.keras.optimizers.Adadelta('
         'epsilon=1e-8): Keras defaults to 1e-7', _SILENT,
         unless_given=(('epsilon', 2),)),
    Rule('image-resize-v1', 'api:image.resize_images', 'silent', SILENT,
         'tf.image.resize_images', "tf.image.resize: TF 2 samples at "
         'half-pixel centres and has no align_corners, so outputs differ '
         'from TF 1 for the same arguments', _SILENT),
    Rule('image-resize-methods', 'api:image.resize_bilinear|resize_bicubic|'
         'resize_nearest_neighbor|resize_area', 'silent', SILENT,
         'tf.image.resize_bilinear / nearest_neighbor / bicubic / area',
         "tf.image.resize(method=...): TF 2 samples at half-pixel centres "
         'where TF 1 did not (half_pixel_centers=False), so outputs differ',
         _SILENT),
    # TPUEstimator and its configuration.
    Rule('tpu-estimator', 'api:*.TPUEstimator', 'tpu-estimator', BREAKS,
         'TPUEstimator', 'a Keras model trained under TPUStrategy (fit, or a '
         'loop of strategy.run)', _MODEL_FN),
    Rule('estimator-spec', 'api:*.TPUEstimatorSpec', 'tpu-estimator', BREAKS,
         'TPUEstimatorSpec', 'the return values of a train_step / eval_step; '
         'predictions from the model itself', _MODEL_FN),
    Rule('estimator-spec-v1', 'api:*.EstimatorSpec', 'tpu-estimator', BREAKS,
         'EstimatorSpec', 'the return values of a train_step / eval_step; '
         'predictions from the model itself', _MODEL_FN),
    Rule('tpu-config', 'api:*.TPUConfig', 'tpu-estimator', BREAKS,
         'TPUConfig', 'steps_per_execution (or steps in a tf.range loop); '
         'the strategy replaces num_shards', _CONFIG),
    Rule('run-config', 'api:*.RunConfig', 'tpu-estimator', BREAKS,
         'RunConfig', 'a strategy and a tf.train.CheckpointManager '
         '(model_dir, save_checkpoints_steps, keep_checkpoint_max)', _CONFIG),
    Rule('iterations-per-loop', 'keyword:iterations_per_loop',
         'tpu-estimator', BREAKS, 'iterations_per_loop',
         'compile(steps_per_execution=N) or N steps in one tf.function',
         _CONFIG),
    Rule('cross-shard-optimizer', 'api:*.CrossShardOptimizer',
         'tpu-estimator', BREAKS, 'CrossShardOptimizer',
         "a plain Keras optimizer: the strategy sums the replicas' gradients; "
         'scale the loss by the global batch', _CROSS_SHARD),
    Rule('tpu-cluster-resolver', 'api:*.TPUClusterResolver',
         'tpu-estimator', BREAKS, 'TPUClusterResolver (tf.contrib)',
         'tf.distribute.cluster_resolver.TPUClusterResolver + '
         'tf.tpu.experimental.initialize_tpu_system + TPUStrategy', _TPU),
    Rule('input-pipeline-config', 'api:*.InputPipelineConfig',
         'tpu-estimator', BREAKS, 'InputPipelineConfig',
         'strategy.distribute_datasets_from_function: one input pipeline per '
         'host, each given its InputContext', _BATCH),
    Rule('bfloat16-scope', 'api:*.bfloat16_scope', 'tpu-estimator', BREAKS,
         'tpu.bfloat16_scope', "a Keras mixed-precision policy, "
         "'mixed_bfloat16'", _OPTIMIZERS),
    Rule('cross-replica-sum', 'api:tpu.cross_replica_sum', 'tpu-estimator',
         BREAKS, 'tf.tpu.cross_replica_sum', 'tf.distribute.'
         'get_replica_context().all_reduce(\'sum\', x) inside strategy.run '
         '(all_gather for a concatenation across cores)', _TPU),
    Rule('tpu-v1', 'api:tpu.*', 'tpu-estimator', BREAKS, 'tf.tpu (v1)',
         'TPUStrategy (strategy.run replaces tpu.rewrite / shard / '
         'outside_compilation)', _TPU),
    Rule('batch-size-param', 'subscript:batch_size', 'tpu-estimator', BREAKS,
         "params['batch_size']", 'the global batch, split per replica with '
         'InputContext.get_per_replica_batch_size', _BATCH),
    Rule('host-call', 'keyword:host_call', 'tpu-estimator', BREAKS,
         'host_call', 'tf.summary inside the step, or a Keras TensorBoard '
         'callback', _SUMMARIES),
    Rule('eval-metrics', 'keyword:eval_metrics', 'tpu-estimator', BREAKS,
         'eval_metrics / metric_fn', 'Keras metrics updated in eval_step '
         '(or compile(metrics=...))', _METRICS),
    Rule('scaffold-fn', 'keyword:scaffold_fn', 'tpu-estimator', BREAKS,
         'scaffold_fn', 'a tf.train.Checkpoint restored before training; '
         'migration-convert-checkpoint for old checkpoints', _CHECKPOINTS),
    Rule('scaffold', 'api:*.Scaffold', 'tpu-estimator', BREAKS, 'Scaffold',
         'a tf.train.Checkpoint restored before training', _CHECKPOINTS),
    Rule('export-saved-model', 'method:export_saved_model', 'tpu-estimator',
         BREAKS, 'Estimator.export_saved_model', 'tf.saved_model.save with '
         'an explicit serving signature', _EXPORT),
    Rule('export-savedmodel', 'method:export_savedmodel', 'tpu-estimator',
         BREAKS, 'Estimator.export_savedmodel', 'tf.saved_model.save with an '
         'explicit serving signature', _EXPORT),
    Rule('train-and-evaluate', 'api:*.train_and_evaluate', 'tpu-estimator',
         BREAKS, 'train_and_evaluate', "fit(validation_data=...) or your "
         "loop's evaluation; a separate evaluator reads checkpoints",
         _TRAIN_AND_EVALUATE),
    Rule('estimator-call', 'input_fn-call:train|evaluate|predict:input_fn,'
         'hooks,steps,max_steps,saving_listeners,checkpoint_path,name,'
         'predict_keys,yield_single_examples',
         'tpu-estimator', BREAKS, 'Estimator.train/evaluate/predict(input_fn)',
         'model.fit / evaluate / predict on a tf.data.Dataset, or your loop '
         'over strategy.experimental_distribute_dataset', _MODEL_FN),
    # Hooks.
    Rule('session-hook', 'api:*.*Hook', 'tpu-estimator', BREAKS,
         'session hook', _KERAS_SAVES_IT, _HOOKS),
    Rule('hooks', 'keyword:hooks', 'tpu-estimator', BREAKS, 'hooks=',
         _KERAS_SAVES_IT, _HOOKS),
    Rule('training-hooks', 'keyword:training_hooks', 'tpu-estimator', BREAKS,
         'training_hooks=', _KERAS_SAVES_IT, _HOOKS),
    Rule('evaluation-hooks', 'keyword:evaluation_hooks', 'tpu-estimator',
         BREAKS, 'evaluation_hooks=', _KERAS_SAVES_IT, _HOOKS),
    # tf.estimator, whatever the spelling.
    Rule('serving-receiver', 'api:estimator.export.*', 'estimator', BREAKS,
         'tf.estimator.export (serving receivers and outputs)', 'a '
         'tf.function with an input_signature returning a dict, saved as the '
         'serving_default signature', _EXPORT),
    Rule('mode-keys', 'api:*.ModeKeys', 'estimator', BREAKS, 'ModeKeys',
         'separate train_step / eval_step / predict functions (or '
         "Keras's training= argument)", _MODEL_FN),
    Rule('feature-columns', 'api:feature_column.*', 'estimator', STYLE,
         'tf.feature_column', 'Keras preprocessing layers (StringLookup, '
         'Hashing, Discretization, ...) or tf.keras.utils.FeatureSpace: '
         'feature columns are deprecated and Keras 3 has no DenseFeatures',
         _MODEL_FN,
         undecided=TF1_SHAPE),
    Rule('estimator', 'api:estimator.*', 'estimator', BREAKS, 'tf.estimator',
         'Keras and tf.distribute (tf.estimator is gone from TF 2.16)',
         _MODEL_FN),
    Rule('estimator-private', 'api:python.estimator.*', 'estimator', BREAKS,
         'tensorflow.python.estimator', 'Keras and tf.distribute '
         '(tf.estimator is gone from TF 2.16)', _MODEL_FN),
    # tf.contrib: gone, each sub-module to its own place.
    Rule('layer-norm-epsilon', 'api:contrib.layers|slim.layer_norm',
         'contrib', SILENT, 'contrib layer_norm (epsilon 1e-12)',
         'tf.keras.layers.LayerNormalization(epsilon=1e-12, axis=-1): '
         "contrib's layer_norm divides by sqrt(variance + 1e-12), Keras's "
         'default epsilon is 1e-3, which changes the outputs (BERT-class '
         'models keep 1e-12)', _SILENT),
    Rule('checkpoints-iterator',
         'api:*.checkpoints_iterator|wait_for_new_checkpoint', 'contrib',
         BREAKS, 'contrib checkpoints_iterator', 'tf.train.checkpoints_'
         'iterator (TF 2 keeps it, with the same arguments)', _CHECKPOINTS),
    Rule('wrapper-call', 'wrapper:contrib', 'contrib', BREAKS, '{wrapper}',
         'a wrapper the scanner cannot follow: its {count} use(s) in this '
         "file ({uses}) are tf.contrib's; migrate each as the tf.contrib "
         'rows say', _CONTRIB,
         title='a wrapper around tf.contrib (contrib.tpu())'),
    Rule('contrib-tpu', 'api:contrib.tpu.*', 'contrib', BREAKS,
         'tf.contrib.tpu', 'tf.distribute.TPUStrategy, tf.tpu.experimental',
         _CONTRIB),
    Rule('contrib-slim', 'api:contrib.slim.*', 'contrib', BREAKS,
         'tf.contrib.slim', 'tf.keras.layers (slim.conv2d -> Conv2D, '
         'arg_scope -> layer arguments); the tf-slim package only as a '
         'stop-gap', _CONTRIB),
    Rule('contrib-layers', 'api:contrib.layers.*', 'contrib', BREAKS,
         'tf.contrib.layers', 'tf.keras.layers; regularizers and '
         'initializers from tf.keras', _CONTRIB),
    Rule('contrib-framework', 'api:contrib.framework.*', 'contrib', BREAKS,
         'tf.contrib.framework', 'tf.train.Checkpoint (variables, '
         'init_from_checkpoint), tf.nest, arg_scope dropped', _CONTRIB),
    Rule('contrib-training', 'api:contrib.training.*', 'contrib', BREAKS,
         'tf.contrib.training', 'plain Python or dataclasses for HParams; '
         'tf.data for batching and bucketing; tf.train.checkpoints_iterator '
         'for its evaluation loop', _CONTRIB),
    Rule('contrib-data', 'api:contrib.data.*', 'contrib', BREAKS,
         'tf.contrib.data', 'tf.data (parallel_interleave -> '
         'Dataset.interleave(num_parallel_calls=...), map_and_batch -> '
         'map + batch)', _CONTRIB),
    Rule('contrib-summary', 'api:contrib.summary.*', 'contrib', BREAKS,
         'tf.contrib.summary', 'tf.summary (TF 2: a default writer and a '
         'step)', _SUMMARIES),
    Rule('contrib-metrics', 'api:contrib.metrics.*', 'contrib', BREAKS,
         'tf.contrib.metrics', 'tf.keras.metrics', _METRICS),
    Rule('contrib-opt', 'api:contrib.opt.*', 'contrib', BREAKS,
         'tf.contrib.opt', 'tf.keras.optimizers (AdamW, and the '
         'optimizers of Keras 3)', _OPTIMIZERS),
    Rule('contrib-rnn', 'api:contrib.rnn.*', 'contrib', BREAKS,
         'tf.contrib.rnn', 'tf.keras.layers.LSTM / GRU / RNN cells',
         _CONTRIB),
    Rule('contrib-learn', 'api:contrib.learn.*', 'contrib', BREAKS,
         'tf.contrib.learn', 'Keras and tf.data', _CONTRIB),
    Rule('contrib', 'api:contrib.*', 'contrib', BREAKS, 'tf.contrib',
         'removed in TF 2: its TPU parts are in tf.distribute / tf.tpu, the '
         'rest in Keras or add-on packages', _CONTRIB),
    # TF 1 graph mode.
    Rule('session', 'api:Session', 'graph', BREAKS, 'tf.Session',
         'eager code and tf.function', _SESSIONS),
    Rule('interactive-session', 'api:InteractiveSession', 'graph', BREAKS,
         'tf.InteractiveSession', 'eager code', _SESSIONS),
    Rule('placeholder', 'api:placeholder', 'graph', BREAKS,
         'tf.placeholder', "a tf.function's argument (input_signature for "
         'serving)', _SESSIONS),
    Rule('placeholder-with-default', 'api:placeholder_with_default', 'graph',
         BREAKS, 'tf.placeholder_with_default', "a tf.function's argument "
         'with a Python default', _SESSIONS),
    Rule('config-proto', 'api:ConfigProto', 'graph', BREAKS,
         'tf.ConfigProto', 'tf.config (set_visible_devices, '
         'experimental.set_memory_growth, threading)', _SESSIONS),
    Rule('disable-v2', 'api:disable_v2_behavior', 'graph', BREAKS,
         'tf.disable_v2_behavior', 'nothing, once the file runs eagerly: it '
         'turns TF 2 off for the whole process', _TF1),
    Rule('disable-eager', 'api:disable_eager_execution', 'graph', BREAKS,
         'tf.disable_eager_execution', 'nothing, once the code runs eagerly '
         '(tf.function for graphs)', _TF1),
    Rule('variable-scope', 'api:variable_scope', 'graph', BREAKS,
         'tf.variable_scope', 'a Keras layer or tf.Module owning its '
         'variables (tf.name_scope only names ops)', _GRAPH),
    Rule('get-variable', 'api:get_variable', 'graph', BREAKS,
         'tf.get_variable', 'tf.Variable created once in a layer or '
         "tf.Module's __init__/build; reuse by keeping the object", _GRAPH),
    Rule('trainable-variables', 'api:trainable_variables', 'graph', BREAKS,
         'tf.trainable_variables', 'model.trainable_variables', _GRAPH),
    Rule('global-variables', 'api:global_variables', 'graph', BREAKS,
         'tf.global_variables', 'model.variables (and optimizer.variables)',
         _GRAPH),
    Rule('variables-initializer', 'api:global_variables_initializer',
         'graph', BREAKS, 'tf.global_variables_initializer', 'nothing: '
         'variables are initialised when created', _GRAPH),
    Rule('collections', 'api:get_collection', 'silent', SILENT,
         'tf.get_collection', 'explicit lists: model.losses for '
         'regularisation, model.updates are applied by Keras itself; under '
         'eager code a v1 collection is empty, so what it fed (batch-norm '
         'moving averages, regularisation) is silently lost', _SILENT),
    Rule('add-to-collection', 'api:add_to_collection', 'graph', BREAKS,
         'tf.add_to_collection', 'keep the object in a list or attribute '
         '(layer.add_loss for losses)', _GRAPH),
    Rule('graph-keys', 'api:GraphKeys', 'graph', BREAKS, 'tf.GraphKeys',
         'no collections in TF 2: see tf.get_collection', _GRAPH),
    Rule('gradients', 'api:gradients', 'graph', BREAKS, 'tf.gradients',
         'tf.GradientTape (tape.gradient); tf.gradients still works inside '
         'a tf.function', _GRAPH,
         # Graph-only either way: inside a tf.function it is TF 2's.
         enclosing=(('decorator:function', TF2_SHAPE),)),
    Rule('initializers-v1', 'api:initializers.*', 'graph', BREAKS,
         'tf.initializers (v1)', 'tf.keras.initializers (the same names in '
         'CamelCase, e.g. GlorotUniform)', _GRAPH,
         undecided=TF2_SHAPE),
    Rule('make-template', 'api:make_template', 'graph', BREAKS,
         'tf.make_template', 'a Keras layer or tf.Module called twice',
         _GRAPH),
    Rule('global-step', 'api:train.get_or_create_global_step', 'graph',
         BREAKS, 'global step', 'optimizer.iterations', _OPTIMIZERS),
    Rule('get-global-step', 'api:train.get_global_step', 'graph', BREAKS,
         'global step', 'optimizer.iterations', _OPTIMIZERS),
    Rule('saver', 'api:train.Saver', 'graph', BREAKS, 'tf.train.Saver',
         'tf.train.Checkpoint and CheckpointManager (name-based '
         'checkpoints: migration-convert-checkpoint)', _CHECKPOINTS),
    Rule('init-from-checkpoint', 'api:train.init_from_checkpoint', 'graph',
         BREAKS, 'tf.train.init_from_checkpoint', 'tf.train.Checkpoint '
         'restore (name-based checkpoints: migration-convert-checkpoint)',
         _CHECKPOINTS),
    Rule('monitored-session', 'api:train.MonitoredTrainingSession', 'graph',
         BREAKS, 'tf.train.MonitoredTrainingSession', 'a training loop over '
         'strategy.run with a CheckpointManager', _HOOKS),
    # Files, records and input pipelines.
    Rule('gfile', 'api:gfile.*', 'io', BREAKS, 'tf.gfile',
         'tf.io.gfile (GFile, exists, makedirs, glob, listdir: snake_case '
         'names)', _IO,
         mechanical='tf.gfile -> tf.io.gfile'),
    Rule('python-io', 'api:python_io.*', 'io', BREAKS, 'tf.python_io',
         'tf.io (TFRecordWriter, TFRecordOptions) and '
         'tf.data.TFRecordDataset for reading', _IO,
         mechanical='tf.python_io -> tf.io'),
    Rule('parse-single-example', 'api:parse_single_example', 'io', BREAKS,
         'tf.parse_single_example', 'tf.io.parse_single_example', _IO,
         mechanical='tf.X -> tf.io.X (parsing and features)'),
    Rule('parse-example', 'api:parse_example', 'io', BREAKS,
         'tf.parse_example', 'tf.io.parse_example', _IO,
         mechanical='tf.X -> tf.io.X (parsing and features)'),
    Rule('fixed-len-feature', 'api:FixedLenFeature', 'io', BREAKS,
         'tf.FixedLenFeature', 'tf.io.FixedLenFeature', _IO,
         mechanical='tf.X -> tf.io.X (parsing and features)'),
    Rule('var-len-feature', 'api:VarLenFeature', 'io', BREAKS,
         'tf.VarLenFeature', 'tf.io.VarLenFeature', _IO,
         mechanical='tf.X -> tf.io.X (parsing and features)'),
    Rule('decode-raw', 'api:decode_raw', 'io', BREAKS, 'tf.decode_raw',
         'tf.io.decode_raw', _IO,
         mechanical='tf.X -> tf.io.X (parsing and features)'),
    Rule('to-dtype', 'api:to_int32', 'io', BREAKS, 'tf.to_int32',
         'tf.cast(x, tf.int32)', _IO,
         mechanical='tf.to_<dtype>(x) -> tf.cast(x, dtype)'),
    Rule('to-float', 'api:to_float', 'io', BREAKS, 'tf.to_float',
         'tf.cast(x, tf.float32)', _IO,
         mechanical='tf.to_<dtype>(x) -> tf.cast(x, dtype)'),
    Rule('to-int64', 'api:to_int64', 'io', BREAKS, 'tf.to_int64',
         'tf.cast(x, tf.int64)', _IO,
         mechanical='tf.to_<dtype>(x) -> tf.cast(x, dtype)'),
    Rule('one-shot-iterator', 'method:make_one_shot_iterator', 'io', BREAKS,
         'Dataset.make_one_shot_iterator', 'iterate the dataset (for batch '
         'in dataset, or iter(dataset))', _IO),
    Rule('initializable-iterator', 'method:make_initializable_iterator',
         'io', BREAKS, 'Dataset.make_initializable_iterator',
         'iterate the dataset; a new iter() restarts it', _IO),
    Rule('dataset-output-shapes',
         'attribute:output_shapes|output_types|output_classes', 'io', BREAKS,
         'Dataset.output_shapes / output_types / output_classes',
         'dataset.element_spec (tf.compat.v1.data.get_output_shapes(dataset) '
         'and get_output_types keep it running)', _IO),
    Rule('data-iterators-v1', 'api:data.make_one_shot_iterator', 'io',
         BREAKS, 'tf.data.make_one_shot_iterator', 'iter(dataset)', _IO),
    # Optimizers, schedules and layers.
    Rule('sgd-v1', 'api:train.GradientDescentOptimizer', 'train-layers',
         BREAKS, 'tf.train.GradientDescentOptimizer',
         'tf.keras.optimizers.SGD (schedules count optimizer.iterations)',
         _OPTIMIZERS),
    Rule('momentum-v1', 'api:train.MomentumOptimizer', 'train-layers',
         BREAKS, 'tf.train.MomentumOptimizer',
         'tf.keras.optimizers.SGD(momentum=...) (use_nesterov -> nesterov)',
         _OPTIMIZERS),
    Rule('optimizer-v1', 'api:train.*Optimizer', 'train-layers', BREAKS,
         'tf.train optimizer', 'tf.keras.optimizers (schedules count '
         'optimizer.iterations)', _OPTIMIZERS),
    Rule('minimize-global-step',
         'method-arg:minimize:1:global_step:var_list|variables|vars', 'train-layers',
         BREAKS, 'minimize(loss, global_step)', 'a Keras optimizer counts '
         "its steps itself (optimizer.iterations); its minimize's second "
         'argument is var_list: minimize(loss, var_list, tape=tape)',
         _OPTIMIZERS),
    Rule('minimize-global-step-keyword', 'method-arg:minimize:global_step',
         'train-layers', BREAKS, 'minimize(global_step=)', 'a Keras '
         'optimizer counts its steps itself (optimizer.iterations) and takes '
         'no global_step', _OPTIMIZERS),
    Rule('apply-gradients-global-step',
         'method-arg:apply_gradients:1:global_step:name', 'train-layers',
         BREAKS, 'apply_gradients(grads_and_vars, global_step)', 'a Keras '
         'optimizer counts its steps itself (optimizer.iterations); its '
         "apply_gradients' second argument is name (Keras 3 takes none): "
         'apply_gradients(zip(grads, variables))', _OPTIMIZERS),
    Rule('apply-gradients-global-step-keyword',
         'method-arg:apply_gradients:global_step', 'train-layers', BREAKS,
         'apply_gradients(global_step=)', 'a Keras optimizer counts its '
         'steps itself (optimizer.iterations) and takes no global_step',
         _OPTIMIZERS),
    Rule('compute-gradients', 'method:compute_gradients', 'train-layers',
         BREAKS, 'Optimizer.compute_gradients', 'tf.GradientTape: '
         'grads = tape.gradient(loss, variables), then '
         'optimizer.apply_gradients(zip(grads, variables)); a Keras '
         'optimizer has no compute_gradients', _OPTIMIZERS),
    Rule('decay-v1', 'api:train.*_decay', 'train-layers', BREAKS,
         'tf.train learning-rate decay', 'a tf.keras.optimizers.schedules '
         'schedule (it counts optimizer.iterations, not a global step)',
         _OPTIMIZERS),
    Rule('piecewise-constant', 'api:train.piecewise_constant',
         'train-layers', BREAKS, 'tf.train.piecewise_constant',
         'tf.keras.optimizers.schedules.PiecewiseConstantDecay', _OPTIMIZERS),
    Rule('layers-v1', 'api:layers.*', 'train-layers', BREAKS,
         'tf.layers', 'tf.keras.layers (same names keep checkpoint names)',
         _OPTIMIZERS),
    Rule('metrics-v1', 'api:metrics.*', 'train-layers', BREAKS,
         'tf.metrics (v1)', 'tf.keras.metrics objects (update_state, '
         'result), not (value, update_op) pairs', _METRICS),
    Rule('losses-v1', 'api:losses.*', 'train-layers', BREAKS,
         'tf.losses (v1)', _V1_LOSS, _CROSS_SHARD),
    # Summaries.
    Rule('summary-v1', 'api:summary.*', 'summaries', BREAKS,
         'tf.summary (v1)', 'tf.summary (TF 2) under a default writer and a '
         'step: writer.as_default(step=...)', _SUMMARIES,
         **_SUMMARY_SHAPE),
    # tf.flags, tf.app, tf.logging.
    Rule('flags', 'api:flags.*', 'flags-logging', BREAKS, 'tf.flags',
         'absl.flags (the same DEFINE_* functions: from absl import flags)',
         _ABSL,
         mechanical='tf.flags / tf.app.flags -> absl.flags'),
    Rule('app-flags', 'api:app.flags.*', 'flags-logging', BREAKS,
         'tf.app.flags', 'absl.flags (the same DEFINE_* functions: from absl '
         'import flags)', _ABSL,
         mechanical='tf.flags / tf.app.flags -> absl.flags'),
    Rule('app', 'api:app.*', 'flags-logging', BREAKS, 'tf.app',
         'absl.app (app.run(main))', _ABSL,
         mechanical='tf.app.run -> absl.app.run'),
    Rule('logging', 'api:logging.*', 'flags-logging', BREAKS, 'tf.logging',
         'absl.logging (logging.info, logging.set_verbosity)', _ABSL,
         mechanical='tf.logging -> absl.logging'),
    Rule('dimension-value', 'shape-attribute:value', 'tf1-api', BREAKS,
         'Dimension.value', "drop .value: TF 2's shape[i] is an int or None "
         '(AttributeError on .value, under tf.compat.v1 too); '
         'tf.compat.dimension_value(shape[i]) reads both', _TF1, step=1),
    # tf.compat.v1 itself.
    Rule('compat-v1-import', 'import:tensorflow.compat.v1', 'compat', COMPAT,
         'import of tensorflow.compat.v1', 'import tensorflow as tf '
         '(TF 2 behaviour) once the file has no v1 constructs', _MODEL_FN),
    Rule('tutorials-module', 'import:tensorflow.examples.*', 'io', BREAKS,
         'tensorflow.examples (removed)', 'tf.keras.datasets (mnist.'
         'load_data()) or tensorflow_datasets: TF 2 ships no tensorflow.'
         'examples, ModuleNotFoundError on 2.15', _IO, step=1),
    Rule('private-xla', 'import:tensorflow.compiler.*', 'tf1-api', REVIEW,
         'tensorflow.compiler (private)', 'the public API: xla.replica_id() '
         'is tf.distribute.get_replica_context().replica_id_in_sync_group '
         'inside strategy.run; private modules move between releases', _TF1),
    Rule('private-api', 'import:tensorflow.python.*', 'tf1-api', STYLE,
         'tensorflow.python (private)', 'the public tf.* name: private '
         'modules move between releases', _TF1),
)

# Calls that take an Estimator's or a TPU API's keywords (host_call=,
# hooks=, iterations_per_loop=) and its model_fn and input_fn, by the name
# called, for code that reaches them through a wrapper the scanner cannot
# follow (t2t's contrib.tpu().TPUEstimatorSpec) or an estimator object.
ESTIMATOR_CALLEES = frozenset({
    'Estimator', 'TPUEstimator', 'EstimatorSpec', 'TPUEstimatorSpec',
    'RunConfig', 'TPUConfig', 'InputPipelineConfig', 'train', 'evaluate',
    'predict', 'train_and_evaluate', 'TrainSpec', 'EvalSpec',
    'export_saved_model', 'export_savedmodel', 'MonitoredTrainingSession'})

# Symbols tf.compat.v2 has that TF 2's tf does not (2.15.1 and 2.21.0; a
# test reads them from the installed TensorFlow): through a compat.v2 alias
# they are no finding.
IN_COMPAT_V2_ONLY = frozenset({'enable_v2_behavior'})

# Private modules TPU-era code imported its Estimator pieces from, and the
# public path of what they hold: a use through them is reported as the
# public spelling is (tpu_estimator.TPUEstimator is tf.estimator.tpu's).
# Longest first; a module under one is under its home too.
PRIVATE_HOMES = {
    'tensorflow.python.tpu.tpu_estimator': 'tensorflow.estimator.tpu',
    'tensorflow.python.tpu.tpu_config': 'tensorflow.estimator.tpu',
    'tensorflow.python.tpu.tpu_context': 'tensorflow.estimator.tpu',
    'tensorflow.python.tpu.tpu_optimizer': 'tensorflow.compat.v1.tpu',
    'tensorflow.python.tpu.tpu': 'tensorflow.compat.v1.tpu',
    'tensorflow.python.platform.flags': 'tensorflow.flags',
    'tensorflow.python.platform.tf_logging': 'tensorflow.logging',
    'tensorflow.python.platform.gfile': 'tensorflow.gfile',
    'tensorflow.python.estimator.estimator': 'tensorflow.estimator',
    'tensorflow.python.estimator.run_config': 'tensorflow.estimator',
    'tensorflow.python.estimator.model_fn': 'tensorflow.estimator',
    'tensorflow.python.estimator.training': 'tensorflow.estimator',
    'tensorflow.python.estimator.estimator_lib': 'tensorflow.estimator',
    'tensorflow_estimator.python.estimator.tpu.tpu_estimator':
        'tensorflow.estimator.tpu',
    'tensorflow_estimator.python.estimator.tpu.tpu_config':
        'tensorflow.estimator.tpu',
    'tensorflow_estimator.python.estimator.tpu': 'tensorflow.estimator.tpu',
    'tensorflow_estimator.python.estimator.estimator': 'tensorflow.estimator',
    'tensorflow_estimator.python.estimator.run_config': 'tensorflow.estimator',
    'tensorflow_estimator.python.estimator.model_fn': 'tensorflow.estimator',
    'tensorflow_estimator.python.estimator.training': 'tensorflow.estimator',
    'tensorflow_estimator.python.estimator.estimator_lib':
        'tensorflow.estimator',
    'tensorflow.contrib.tpu.python.tpu.tpu_estimator': 'tensorflow.contrib.tpu',
    'tensorflow.contrib.tpu.python.tpu.tpu_config': 'tensorflow.contrib.tpu',
    'tensorflow.contrib.tpu.python.tpu.tpu_optimizer':
        'tensorflow.contrib.tpu',
}

# tf.contrib is not in TF 2.15, not even in tf.compat.v1: step 1.
RULES = tuple(dataclasses.replace(rule, step=1) if rule.category == 'contrib'
              else rule for rule in _ROWS)

# Rules the engine makes per symbol from tf_api.py (no row of their own).
REMOVED_SYMBOL = Rule(
    'tf1-removed', 'tf_api:removed', 'tf1-api', BREAKS, '{name}',
    'not in TF 2: {target}', _TF1, title='a TF 1 symbol TF 2 does not have')
REMOVED_KEYWORD = Rule(
    'tf1-keyword', 'tf_api:changed', 'tf1-api', BREAKS, '{name}({keyword}=)',
    "TF 2's {name} takes no {keyword}= argument", _TF1,
    title='a keyword argument TF 2 no longer takes')
MOVED_POSITIONAL = Rule(
    'tf1-positional', 'tf_api:changed', 'silent', SILENT,
    '{name} argument {position}', 'argument {position} is {v1} in TF 1 and '
    '{v2} in TF 2: pass it by keyword', _SILENT,
    title='a positional argument whose meaning TF 2 changed', redefined=True)
TOO_MANY_POSITIONAL = Rule(
    'tf1-positional-count', 'tf_api:changed', 'tf1-api', BREAKS,
    '{name} with {given} positional arguments', "TF 2's {name} takes at "
    'most {most}: pass the others by keyword, or drop them', _TF1,
    title='more positional arguments than TF 2 takes')
GENERATED = (REMOVED_SYMBOL, REMOVED_KEYWORD, MOVED_POSITIONAL,
             TOO_MANY_POSITIONAL)
