"""Kubernetes: the manifests (`clustercheck k8s render`), the launcher that creates them through the API
(`--launcher k8s`), and taints as the drain (`--taint`, `clustercheck resume --k8s`). docs/kubernetes.md."""
