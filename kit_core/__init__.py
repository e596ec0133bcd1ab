"""The kit's core: what the tools and the example both use, naming no
dataset and no model.

  errors            the error types shown as one line; exits: how a command
                    ends on one; signals: what an interruptible block got
  process           ending the kit's processes promptly
  atomic, stale     files written whole, and what a killed run left removed;
                    owners: which process made something; private_folders:
                    a process's temporary folders
  paths             output folders checked before any work
  checkpoint_files  checkpoints found by their files and read, a tensor at a
                    time or whole, or one clear error
  tensor_bundle     a TensorFlow checkpoint read with numpy alone; wire: the
                    protocol-buffer wire format and TensorFlow's masked CRC
  room              disk and memory reckoned before the work, refused in one
                    line when clearly short
  timing            where a long command's time goes, by phase; progress:
                    a line as each unit ends, and while one runs; profile:
                    TensorFlow's kernel times
  npz_files         .npz files read without trusting them
  devices, cpu      logical CPU devices (replicas); what the CPU can do
  sharding          the per-replica share of a global batch
  keras_compat      the few places Keras 2 and Keras 3 differ; lazy:
                    TensorFlow imported where it is first used;
                    framework_logs: the frameworks' own log lines held back
  usage             a command's --help, with every flag it reads

Nothing here imports the example (estimator_mnist, migrate, mnist_common)
or the tools (migration_tools); tests/test_boundaries.py checks it.
"""
