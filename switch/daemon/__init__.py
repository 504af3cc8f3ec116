"""``dlcp-switch``: the embedded target (:mod:`switch.target`) as a switch process on real interfaces, programmed
over P4Runtime like BMv2's ``simple_switch_grpc`` (docs/switch-daemon.md).

* :mod:`.main`: the command line (``dlcp-switch``, ``python -m switch.daemon``), the gRPC server and the packet
  thread (:class:`~switch.daemon.main.PacketLoop`).
* :mod:`.device`: the running device that the packet thread, P4Runtime and the management service share (the
  current pipeline, traffic-manager settings, counters) under one lock.
* :mod:`.p4rt`: the P4Runtime server (``p4.v1.P4Runtime``): pipeline configs, entities, arbitration.
* :mod:`.mgmt` (``mgmt.proto``, stubs ``mgmt_pb2*.py``): the traffic-manager management service and its client
  (:class:`~switch.daemon.mgmt.MgmtClient`), for what P4Runtime does not cover (queues, links, custom CRCs).
* :mod:`.portio` (``_portio.c`` for the batched system calls): frames on AF_PACKET sockets; :mod:`.pcap`: per-port
  capture files.
"""
