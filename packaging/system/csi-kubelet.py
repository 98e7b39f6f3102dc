#!/usr/bin/env python3
"""The CSI calls kubelet makes to a node plugin, over its Unix socket, for
packaging/system/csi.sh: grpc-python with stubs compiled from csi/proto.

  csi-kubelet.py SOCKET probe
  csi-kubelet.py SOCKET info
  csi-kubelet.py SOCKET stage VOLUME STAGING [--attr K=V]... [--secret K=V]... [--flag F]...
  csi-kubelet.py SOCKET unstage VOLUME STAGING
  csi-kubelet.py SOCKET publish VOLUME TARGET [--staging STAGING] [--attr K=V]... [--secret K=V]... [--flag F]...
  csi-kubelet.py SOCKET unpublish VOLUME TARGET
  csi-kubelet.py SOCKET stats VOLUME TARGET

Prints the answer as JSON; on an error prints its gRPC code and message and
exits 1. The stubs are compiled once into $CSI_STUBS (a directory; by default
one under the temporary directory) from the checkout's csi/proto.
"""

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "..", "..", "csi", "proto")


def stubs():
    out = os.environ.get("CSI_STUBS") or os.path.join(tempfile.gettempdir(), "shoal-csi-stubs")
    if not os.path.exists(os.path.join(out, "csi_pb2_grpc.py")):
        from grpc_tools import protoc
        import importlib.resources

        os.makedirs(out, exist_ok=True)
        wkt = str(importlib.resources.files("grpc_tools") / "_proto")
        rc = protoc.main(["protoc", "-I" + PROTO_DIR, "-I" + wkt, "--python_out=" + out,
                          "--grpc_python_out=" + out, os.path.join(PROTO_DIR, "csi.proto")])
        if rc != 0:
            sys.exit("cannot compile csi.proto (%d)" % rc)
    sys.path.insert(0, out)
    import csi_pb2
    import csi_pb2_grpc

    return csi_pb2, csi_pb2_grpc


def pairs(items):
    return dict(i.split("=", 1) for i in items or [])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("call", choices=["probe", "info", "stage", "unstage", "publish", "unpublish",
                                    "stats"])
    p.add_argument("volume", nargs="?")
    p.add_argument("target", nargs="?")
    p.add_argument("--attr", action="append")
    p.add_argument("--secret", action="append")
    p.add_argument("--flag", action="append")
    p.add_argument("--staging", default="")
    a = p.parse_args()

    import grpc
    from google.protobuf import json_format

    pb, rpc = stubs()
    with grpc.insecure_channel("unix://" + a.socket) as ch:
        identity, node = rpc.IdentityStub(ch), rpc.NodeStub(ch)
        try:
            if a.call == "probe":
                answer = identity.GetPluginInfo(pb.GetPluginInfoRequest(), timeout=10)
            elif a.call == "info":
                answer = node.NodeGetInfo(pb.NodeGetInfoRequest(), timeout=10)
            elif a.call in ("stage", "publish"):
                cap = pb.VolumeCapability(
                    mount=pb.VolumeCapability.MountVolume(mount_flags=a.flag or []),
                    access_mode=pb.VolumeCapability.AccessMode(
                        mode=pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))
                if a.call == "stage":
                    answer = node.NodeStageVolume(pb.NodeStageVolumeRequest(
                        volume_id=a.volume, staging_target_path=a.target, volume_capability=cap,
                        secrets=pairs(a.secret), volume_context=pairs(a.attr)), timeout=60)
                else:
                    answer = node.NodePublishVolume(pb.NodePublishVolumeRequest(
                        volume_id=a.volume, target_path=a.target, staging_target_path=a.staging,
                        volume_capability=cap, readonly=True, secrets=pairs(a.secret),
                        volume_context=pairs(a.attr)), timeout=60)
            elif a.call == "unstage":
                answer = node.NodeUnstageVolume(pb.NodeUnstageVolumeRequest(
                    volume_id=a.volume, staging_target_path=a.target), timeout=60)
            elif a.call == "unpublish":
                answer = node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
                    volume_id=a.volume, target_path=a.target), timeout=60)
            else:
                answer = node.NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
                    volume_id=a.volume, volume_path=a.target), timeout=30)
        except grpc.RpcError as e:
            print("%s: %s" % (e.code().name, e.details()))
            return 1
    print(json_format.MessageToJson(answer, indent=None, preserving_proto_field_name=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
