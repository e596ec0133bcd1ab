"""The frameworks a port is written in, one registered adapter each
(``base.Framework``): ``framework_of(port)`` answers for a port."""
# Registered in this order: a Keras port's contract is named first.
from migration_tools.pair.frameworks import keras_tf  # pylint: disable=unused-import
from migration_tools.pair.frameworks import arrays  # pylint: disable=unused-import,g-bad-import-order
from migration_tools.pair.frameworks import pytorch  # pylint: disable=unused-import,g-bad-import-order
from migration_tools.pair.frameworks.base import Framework
from migration_tools.pair.frameworks.base import framework_of
from migration_tools.pair.frameworks.base import label
from migration_tools.pair.frameworks.base import load_port
from migration_tools.pair.frameworks.base import emulating
from migration_tools.pair.frameworks.base import register
from migration_tools.pair.frameworks.base import registered
from migration_tools.pair.frameworks.base import titles

__all__ = ['Framework', 'emulating', 'framework_of', 'label', 'load_port',
           'register', 'registered', 'titles']
