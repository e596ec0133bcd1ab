"""The bars the equivalence checks hold a port to (float32, CPU), in one place.

The figures they reach are in docs/EQUIVALENCE.md.
"""
# Every float output of --verify after checkpoint conversion, or
# NOISE_MULTIPLE times the port's own rounding noise on it where that is
# larger (checkpoint/verify.py; integer outputs, e.g. class ids, must be
# equal).
CONVERSION_ATOL = 1e-6
# Forward pass at identical weights (probabilities), and the input pipelines'
# images for the same records.
INFERENCE_ATOL = 1e-6
INPUT_ATOL = 1e-6
# Every eval metric at identical weights, relative to max(1, |legacy value|):
# counts (accuracy, top-k) must agree to the example over up to 1e5 examples,
# means of float outputs to their summation order.
EVAL_METRIC_RTOL = 1e-5
# One step at identical weights: the loss, every gradient, the updated weights
# (and each step of stepwise and dropout).
ONE_STEP_ATOL = 1e-6
# The state after a step (weights, other state, slots, moving averages) is
# stored in float32: a difference within ONE_STEP_ULPS units in the last
# place of the larger of the two values is the rounding of storing it, and
# only what exceeds it is held to ONE_STEP_ATOL. Below 1 that is at most
# 1.2e-7; for an RMSProp mean square of 30 it is 3.8e-6 (one unit there is
# 1.9e-6, over the absolute bar alone). As updates' UPDATE_ULPS, below.
ONE_STEP_ULPS = 2
# The optimizer's hyper-parameters, relative (a float32 config against TF 1's
# attributes).
OPTIMIZER_RTOL = 1e-6
# The learning rate each side applied at a step: LEARNING_RATE_ATOL plus
# LEARNING_RATE_RTOL of the legacy rate, about two float32 roundings (TF 1
# computes a schedule in float32, a PyTorch scheduler in float64: one ulp of
# 0.05 is 3.7e-9). A step read off by one in a 100,000-step decay moves the
# rate 4e-7 of itself, and the error grows with every step.
LEARNING_RATE_ATOL = 1e-9
LEARNING_RATE_RTOL = 2.5e-7
# The schedule read far past the steps taken (the schedule check): TF 1
# computes it in float32, and a float32 pow drifts from float64's by about
# 5.7e-7 of the rate per unit of |ln(rate / the largest rate)| (measured:
# 0.96 ** (s / 1e5) at s = 7.7 million, 1.8e-6 at |ln| 3.1; TF's, against
# the kit's PyTorch port, 1.3e-6 at 5.8 million). The bar adds
# SCHEDULE_LOG_RTOL per unit, about twice that, to LEARNING_RATE_RTOL
# (|ln| capped at SCHEDULE_LOG_CAP, for a rate of 0). A decay of another
# length or shape parts by far more (HF's linear decay after a warmup of 100
# in 1,000 steps: 0.11 of the rate).
SCHEDULE_LOG_RTOL = 1e-6
SCHEDULE_LOG_CAP = 20.0

# The loss of every step of a trajectory, and the weights at its end.
TRAJECTORY_ATOL = 1e-5
# A trajectory (a free run) is held to TRAJECTORY_ATOL only when its steps
# replay exactly: a first step equal to the bit, against a reference that
# groups its sums as the port does (one device, or the legacy step taken as on
# as many TPU cores). The kit's pair then keeps bit-identical weights over 100
# steps on 1, 2 and 4 replicas. Otherwise, rounding differences of ~1e-8 per
# step (Keras's momentum and Adam arithmetic, batch-norm statistics, or a
# legacy step that takes the whole batch at once) are amplified two- to
# threefold per step by early training: measured, correct ports part from the
# legacy run (pass 1e-5) after 5 to 82 steps, as a legacy run perturbed by one
# ulp parts from an unperturbed one (6 to 41 steps), so no bar separates
# rounding from a bug. Then the free run is reported (it must complete with
# finite losses) and `stepwise` holds every step, the port given the legacy
# state before it, to ONE_STEP_ATOL.
# Each variable's update (after minus before) at one step from identical state,
# and each optimizer slot, relative to the legacy one's size, after differences
# within UPDATE_ULPS units in the last place of the values are taken for the
# rounding of storing them (compare/checks/updates.py). Correct ports measured:
# 5e-8 (momentum), 1e-6 (a BERT-shaped Adam with weight decay), and 1.3e-5 in
# Adam's second moment, which TF 1's kernel scales by 1 - beta_2 in float32 and
# Keras by 1 - beta_2 in float64 rounded to float32. A weight decay of 0.01
# left out is 1e-4 to 2e-2 of the step of a weight (0.02 to 0.05 against Adam
# steps of 0.2 to 3 learning rates), at any learning rate.
UPDATE_RTOL = 5e-5
UPDATE_ULPS = 2
# A variable whose every optimizer slot is under NOISE_GRADIENT_SHARE of its
# kind's typical size has a gradient of rounding noise (an attention key's
# bias: softmax cancels it; measured 1e-7 of the typical first moment on
# the ALBERT-style pair, its second moment 1e-14). Adam and LAMB divide by
# its own scale and step about a rate per element in a direction no two
# roundings share: on that pair from weights of scale 0.3, a correct port's
# key-bias updates were 0.88x to 0.98x the legacy ones. Such an update is
# held to NOISE_STEP_RATES learning rates per element (root mean square of
# the difference), which a step in another unit or a rate off by orders
# still exceeds; its formula shows in the other variables.
NOISE_GRADIENT_SHARE = 1e-5
NOISE_STEP_RATES = 10.0
# An update whose norm is within TRUST_RATIO_RTOL of the rate times the
# variable's norm is read as a trust ratio's (LAMB's layer adaptation: the
# ratio ||w|| / ||r|| makes ||lr * ratio * r|| = lr ||w||), one ten times
# that away as none; between the two, not read (the hint of `updates` only
# names a variable read both ways). Measured on the ALBERT-style pair at a
# rate of 1e-3: a correct LAMB 5e-7 to 5e-6 from 1 (the rounding of storing
# the weights), the weight decay added outside the ratio 1.6e-4 to 1.8e-3,
# AdamW's a factor of 56 (median).
TRUST_RATIO_RTOL = 1e-4
# A part's difference is judged over the larger of its own size and this
# fraction of its group's typical size (per element, scaled to its count):
# a variable whose gradient is zero up to rounding has a step of noise. At
# 1% a correct Keras 3 port of the EfficientNet-style test pair failed: the
# beta of a batch norm followed, through linear layers, by another batch
# norm has a gradient that is 0 in exact arithmetic, a sum of 8,192 values
# whose rounding Keras 3's kernels order otherwise, 8e-7 of the typical
# update apart (8e-5 of 1%, over the bar; 8e-6 of 10%).
UPDATE_FLOOR = 1e-1
# A port on another framework may decide a near-tie otherwise: on the kit's
# pair on JAX (XLA:CPU against TF's kernels), at step 13 of 20 a max-pool
# window held two values 1.1e-8 apart at 0.0204 (6 units in the last
# place); the port routed the gradient to the other one, and conv2's update
# parted from the legacy one by 5e-3 at its largest element (8e-4 of the
# update), while float64 agreed with TF to 3e-6. A step over the bar of
# `updates` or `stepwise` is taken for such a near-tie, reported and not
# failed, when it is alone (the steps before and after it within the bar),
# below FLIP_RTOL (updates) or FLIP_ATOL (stepwise), and at most FLIP_SHARE
# of the steps are (none of fewer than 10). A bug in a formula or a
# hyper-parameter shows at every step; one in a schedule at its boundary is
# the learning_rate check's, held to LEARNING_RATE_ATOL and _RTOL.
FLIP_RTOL = 1e-2
FLIP_ATOL = 1e-4
FLIP_SHARE = 0.1
# The outputs at the start state with its kernels and embeddings scaled
# (beyond_init), relative to the larger of 1 and each output's largest
# value: larger weights make larger values, whose rounding is larger too.
BEYOND_INIT_RTOL = 1e-5
# The port's own rounding noise on a step (compare/noise.py): its step taken
# again from the same state on the same batch, the examples in another
# order within each replica's share. A difference from the legacy step
# (one_step, stepwise, updates) counts only beyond NOISE_MULTIPLE times
# what that moved the same tensor by. Measured on the kit's port: on the
# CPU the reordering moves a gradient by 3e-9 to 1.5e-8 (the fixed bars
# decide); on an NVIDIA H200 at JAX's highest precision it moved
# conv2/kernel's gradient by 3.0e-5, where the port parted from TF's on the
# CPU by 1.7e-5 (docs/EQUIVALENCE.md, "Two verdicts on any device").
NOISE_MULTIPLE = 4.0
# The same computation run twice, in the same order from the same state
# (the port's step again; its predict again at the same weights), differs
# by nothing on a CPU, and on a GPU by what atomics in a reduction give (a
# float32 sum of 10,000 terms in another order: about 1e-6 of its largest
# value, 6e-4 at the very worst). Beyond this share of a tensor's largest
# value the port is not computing one thing twice (a jitter, a counter, a
# draw): it is named, and its noise widens no bar (compare/noise.py). A
# 1e-4 jitter of weights of scale 0.05 moves them by 2e-3 of it.
REPEAT_RTOL = 1e-4
# A step whose loss moves by more than this share of itself when its
# examples are reordered is not one sum in two orders (a loss over pairs of
# neighbouring examples): no noise is taken from it. Reordering a float32
# mean of 64 losses moves it by about 1e-7 of itself.
ORDER_RTOL = 1e-3
# The port at its device's precision against itself at the highest
# (compare/checks/device_drift.py): each output's movement, over this
# multiple of its movement with every kernel and embedding moved by up to
# the precision's unit roundoff. A device rounds the activations entering
# each dot as well as the kernels, so a correct port drifts by more than
# the kernels' share alone: measured, see docs/EQUIVALENCE.md.
DRIFT_MULTIPLE = 4.0
# That movement is a mean over this many draws of the kernels' movement
# (mean squares): one draw's movement is a random figure, which on the
# BERT-shaped test pair at bfloat16 ranged over 4x from draw to draw (the
# drift was 0.26x to 1.07x the bar of a single draw, seeds 0 to 6), so
# that one unlucky draw failed a correct port on one CPU and passed it on
# another.
DRIFT_DRAWS = 4
# Each layer's output at identical weights, relative to its scale
# (compare/layers.py), to say where two models part: the first layer over it.
LAYER_RTOL = 1e-5
# The port's training rate, as a fraction of the legacy step's, below which
# --speed reports it for review (a finding, never a failure;
# compare/checks/speed.py). Rates of one run on one CPU spread by a few
# percent between windows.
SPEED_MARGIN = 0.9
# The host_call's tensors at identical state (the loss, the rate a summary
# logs), relative to the larger of 1 and the legacy value.
HOST_CALL_RTOL = 1e-6


def learning_rate_bar(legacy_rate):
  """The bar for a port's rate where the legacy one is legacy_rate (a
  number or an array of them)."""
  return LEARNING_RATE_ATOL + LEARNING_RATE_RTOL * abs(legacy_rate)
