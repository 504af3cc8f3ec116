"""P4Runtime server of the switch daemon: translates P4Runtime (grpcio + the ``finsy.proto`` stubs) to the
:class:`switch.target.Switch` API.

* :mod:`.codec`       -- P4Runtime byte strings, the controller packet headers, P4Data.
* :mod:`.pipeline`    -- device config parsing (raw source or ``p4.tmp.P4DeviceConfig``), P4Info comparison.
* :mod:`.entities`    -- Write/Read of every entity against one pipeline (read-write symmetry).
* :mod:`.arbitration` -- primary election per (device, role) over the StreamChannel.
* :mod:`.service`     -- the ``p4.v1.P4Runtime`` servicer.
"""
