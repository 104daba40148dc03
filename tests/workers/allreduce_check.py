"""Worker for the environment test: every rank allreduces (rank + 1) and checks the result."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

tf.compat.v1.disable_eager_execution()
hvd.init()
value = tf.constant([float(hvd.rank() + 1)] * 3)
summed = hvd.allreduce(value, op=hvd.Sum)
averaged = hvd.allreduce(value, op=hvd.Average)
with tf.compat.v1.Session() as sess:
  got_sum, got_avg = sess.run([summed, averaged])
size = hvd.size()
expected_sum = size * (size + 1) / 2.0
np.testing.assert_allclose(got_sum, [expected_sum] * 3)
np.testing.assert_allclose(got_avg, [expected_sum / size] * 3)
print("rank %d of %d: allreduce ok sum=%s" % (hvd.rank(), size, got_sum[0]))
sys.stdout.flush()
