"""The names pdplan writes into file names, scripts and Kubernetes objects, and their rules.

A name is checked where it enters pdplan (the cluster file, a manifest, a flag) and then used as
it is, never rewritten. Each rule returns ``None`` for a good name, else what the name must be,
so a loader can raise it with file, line and field and ``validate`` can list it as a violation.

Sources: Kubernetes' "Object Names and IDs" (DNS-1123 labels and subdomains) and "Labels and
Selectors" (label values, at most 63 characters), the container image reference grammar
of distribution/reference (``regexp.go``, ``reference.go``), which Docker, containerd and the
kubelet parse image names with, and huggingface_hub's repository id check (``validate_repo_id``).
"""

from __future__ import annotations

import re

from pdplan import limits

#: DNS-1123 label (RFC 1123): a Service's name, a label's segment; pdplan's pool and instance
#: names, which become object names, label values and file names.
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS_LABEL_MAX = 63
#: DNS-1123 subdomain: labels joined by dots; node names and most object names.
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*"
DNS_SUBDOMAIN_MAX = 253
#: A node name is also the value of its kubernetes.io/hostname label, which node affinity
#: matches, and a label value is at most 63 characters.
NODE_NAME_MAX = 63
#: pdplan names a node type's nodes ``<type>-<index>`` (placement.solve), index below MAX_NODES.
NODE_SUFFIX_MAX = len(f"-{limits.MAX_NODES - 1}")

_LABEL_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit"
_SUBDOMAIN_RULE = f"{_LABEL_RULE}, '.' between such parts"


def dns_label(name: str) -> str | None:
    """A DNS-1123 label of at most 63 characters (pool, instance and composed object names)."""
    return _rule(name, _DNS_LABEL, DNS_LABEL_MAX, f"a DNS-1123 label ({_LABEL_RULE})")


def dns_subdomain(name: str) -> str | None:
    """A DNS-1123 subdomain of at most 253 characters (a manifest's name: objects, file names)."""
    return _rule(name, _DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, f"a DNS-1123 subdomain ({_SUBDOMAIN_RULE})")


def node(name: str) -> str | None:
    """A Kubernetes node name that is also a hostname label value: a DNS-1123 subdomain of at
    most 63 characters."""
    return _rule(name, _DNS_SUBDOMAIN, NODE_NAME_MAX, f"a Kubernetes node name ({_SUBDOMAIN_RULE})")


def node_type(name: str) -> str | None:
    """A node type's name: the node names derived from it, ``<type>-<index>``, are node names."""
    most = NODE_NAME_MAX - NODE_SUFFIX_MAX
    problem = _rule(name, _DNS_SUBDOMAIN, most, f"a Kubernetes node name ({_SUBDOMAIN_RULE})")
    if problem is None:
        return None
    return (f"{problem}: pdplan names its nodes <name>-<index>, and a node name is at most "
            f"{NODE_NAME_MAX} characters")


#: A model's name starts the manifest's name, ``<model>[-<precision>]-<decision>`` (lowercased),
#: which names Kubernetes objects; this leaves room for the longest suffix within a subdomain.
MODEL_NAME_MAX = 200


def model_name(name: str) -> str | None:
    """A model's name: lowercased, a DNS-1123 subdomain (letters of either case, digits, '-' and
    '.'), so the manifest named after it is a Kubernetes object name."""
    problem = _rule(name.lower(), _DNS_SUBDOMAIN, MODEL_NAME_MAX, "a Kubernetes object name once lowercased "
                    "(letters, digits, '-' and '.', starting and ending with a letter or digit)")
    return None if problem is None else f"{problem}: the manifest and its objects are named after it"


def _rule(name: str, pattern: str, most: int, what: str) -> str | None:
    if len(name) <= most and re.fullmatch(pattern, name):
        return None
    return f"must be {what} of at most {most} characters"


#: Kubernetes label syntax ("Labels and Selectors"; apimachinery validation.IsQualifiedName and
#: IsValidLabelValue): a key is an optional DNS-1123 subdomain prefix of at most 253 characters and
#: '/', then a name of at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending
#: alphanumeric; a value is empty or such a name.
_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_NAME_MAX = 63


def label_key(key: str) -> str | None:
    """A Kubernetes label key, ``[prefix/]name`` (``nvidia.com/gpu.product``)."""
    prefix, _, name = key.rpartition("/")
    if (len(name) <= LABEL_NAME_MAX and re.fullmatch(_LABEL_NAME, name, re.ASCII)
            and (not prefix or (len(prefix) <= DNS_SUBDOMAIN_MAX and re.fullmatch(_DNS_SUBDOMAIN, prefix)))):
        return None
    return (f"must be a Kubernetes label key, [prefix/]name: a name of at most {LABEL_NAME_MAX} letters, digits, "
            f"'-', '_' and '.', starting and ending with a letter or digit, after an optional DNS-1123 subdomain "
            "prefix and '/'")


def label_value(value: str) -> str | None:
    """A Kubernetes label value (``NVIDIA-H100-80GB-HBM3``); pdplan asks for a non-empty one."""
    if len(value) <= LABEL_NAME_MAX and re.fullmatch(_LABEL_NAME, value, re.ASCII):
        return None
    return (f"must be a Kubernetes label value: at most {LABEL_NAME_MAX} letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit")


# distribution/reference's grammar (regexp.go): reference := name [":" tag] ["@" digest].
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"\w[\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"({_NAME})(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
#: reference.go's NameTotalLengthMax: the name (registry and repository) is at most 255 characters.
IMAGE_NAME_MAX = 255


def image_reference(image: str) -> str | None:
    """A container image reference: ``[registry[:port]/]repository[:tag][@digest]``."""
    match = _REFERENCE.fullmatch(image)
    if match and len(match.group(1)) <= IMAGE_NAME_MAX:
        return None
    return ("must be an OCI image reference, [registry[:port]/]repository[:tag][@digest] (lowercase "
            f"repository, a tag of letters, digits, '_', '.', '-'; a name of at most {IMAGE_NAME_MAX} characters)")


# huggingface_hub's validate_repo_id (src/huggingface_hub/utils/_validators.py: REPO_ID_REGEX and
# the checks after it): ASCII letters, digits, '_', '-' and '.', each part starting and ending
# with a letter, digit or '_' (the regex's word boundaries), the name at most 96 characters, no
# '--' or '..', not ending in '.git'. pdplan asks for the namespace too (the engines download
# ``owner/name``) and holds it to the same length.
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
HF_REPO_PART_MAX = 96


#: A Hugging Face revision: a branch, a tag (git ref names) or a commit id, as the engines' ``--revision``
#: and huggingface_hub take it (``refs/pr/1`` too). pdplan asks for git's ref-name rules that keep it one
#: argument: no '..', '//', spaces or control characters, not starting with '-' or '/', not ending in
#: '/', '.' or '.lock'.
_REVISION = r"[A-Za-z0-9_][A-Za-z0-9_./+-]*"
REVISION_MAX = 255


def revision(value: str) -> str | None:
    """A checkpoint revision: a branch, tag or commit id (``main``, ``v1.0``, ``refs/pr/1``, a sha)."""
    if (len(value) <= REVISION_MAX and re.fullmatch(_REVISION, value, re.ASCII) and ".." not in value
            and "//" not in value and not value.endswith(("/", ".", ".lock"))):
        return None
    return (f"must be a Hugging Face revision (a branch, tag or commit id) of at most {REVISION_MAX} characters: "
            "letters, digits, '_', '.', '/', '+' and '-', starting with a letter, digit or '_', no '..' or '//', "
            "not ending in '/', '.' or '.lock'")


def hf_repo(repo_id: str) -> str | None:
    """A Hugging Face model repository id, ``owner/name`` (``meta-llama/Llama-2-70b-hf``)."""
    parts = repo_id.split("/")
    if (len(parts) == 2 and all(len(p) <= HF_REPO_PART_MAX and re.fullmatch(_HF_PART, p, re.ASCII) for p in parts)
            and "--" not in repo_id and ".." not in repo_id and not repo_id.endswith(".git")):
        return None
    return ("must be a Hugging Face repository id, <owner>/<name>: letters, digits, '_', '-' and '.', each part "
            f"starting and ending with a letter, digit or '_' and at most {HF_REPO_PART_MAX} characters, no '--' "
            "or '..', not ending in '.git'")
