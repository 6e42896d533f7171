"""Test tooling for the Kubernetes backend: a real control plane on this machine.

`build` makes the control-plane binaries once from source, `cluster` runs them
(`LocalCluster`, `up`/`down`/`status`), `emulator` keeps emulated GPU nodes and their pods
alive without kubelets, and `certs` writes the cluster's PKI. Nothing in the runtime
(`workbench.k8s`) imports from here.
"""
