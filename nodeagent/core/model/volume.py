"""Pod volumes and container volumeMounts: Kubernetes' validation (pkg/apis/core/validation,
ValidateVolumes / ValidateVolumeMounts) and a typed view of what was validated. Pure.

`spec.volumes` and `volumeMounts` stay plain dicts in the Pod model (a pod naming a volume type
this node does not provide, e.g. persistentVolumeClaim, is still a valid Kubernetes object: the
API server stores it; the agent refuses it at admission, pods/volume_plan.py). The checks here are
the API's, with its messages under the camelCase field path:

- a volume: `name` a DNS-1123 label, unique (`Duplicate value`); exactly one volume type
  (`must specify a volume type`, `may not specify more than 1 volume type`); an unknown key is
  `unknown field`, as for the rest of the Pod;
- emptyDir: `sizeLimit` a non-negative quantity; hostPath: `path` required, without '..',
  `type` one of the HostPathType values; configMap / secret: the object's name required,
  `defaultMode` and item modes in 0..0777, items with a `key` and a relative `path` without
  '..'; downwardAPI: items with a relative path and exactly one of fieldRef / resourceFieldRef;
  projected: its sources, each one of configMap / secret / downwardAPI / serviceAccountToken;
- a mount: `name` naming a declared volume (`Not found`), `mountPath` required and unique in the
  container, `subPath` relative without '..' (so it cannot leave the volume), `subPath` and
  `subPathExpr` mutually exclusive.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nodeagent.core.errors import FieldError
from nodeagent.core.names import dns1123_label_errors, dns1123_subdomain_errors, invalid, quote
from nodeagent.core.quantity import Quantity, parse_quantity

FILE_MODE_MSG = "must be a number between 0 and 0777 (octal), both inclusive"
MAX_MODE = 0o777
DEFAULT_MODE = 0o644  # configMap, secret, downwardAPI, projected: the API's default
HOST_PATH_TYPES = ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice",
                   "BlockDevice")
# every VolumeSource of core/v1: a key outside these is an unknown field
VOLUME_TYPES = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
)
MOUNT_FIELDS = ("name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation", "recursiveReadOnly")
MOUNT_PROPAGATIONS = ("None", "HostToContainer", "Bidirectional")
_ZERO = parse_quantity("0")
_FIELD_REFS = ("metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations")


@dataclass(frozen=True)
class KeyToPath:
    key: str
    path: str
    mode: int | None = None


@dataclass(frozen=True)
class DownwardFile:
    """One downwardAPI item: a field of the pod (fieldRef) or a resource of a container."""

    path: str
    field_path: str | None = None
    container_name: str | None = None
    resource: str | None = None
    divisor: str | None = None
    mode: int | None = None


@dataclass(frozen=True)
class Projection:
    """One source of a projected volume, or a configMap / secret / downwardAPI volume itself."""

    kind: str  # "configMap", "secret" or "downwardAPI"
    name: str = ""  # the ConfigMap's or Secret's name
    items: tuple[KeyToPath, ...] = ()
    optional: bool = False
    files: tuple[DownwardFile, ...] = ()  # downwardAPI


@dataclass(frozen=True)
class Volume:
    """One entry of spec.volumes, typed for the kinds this node provides (`raw` keeps the rest)."""

    name: str
    kind: str  # one of VOLUME_TYPES
    medium: str = ""  # emptyDir
    size_limit: Quantity | None = None  # emptyDir
    host_path: str = ""  # hostPath
    host_path_type: str = ""
    default_mode: int = DEFAULT_MODE  # configMap, secret, downwardAPI, projected
    projections: tuple[Projection, ...] = ()  # configMap, secret, downwardAPI: one; projected: its sources
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VolumeMount:
    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""
    sub_path_expr: str = ""
    mount_propagation: str | None = None


# ---- validation ----
def _is_str(v: object) -> bool:
    return isinstance(v, str)


def _type_error(path: str, value: object, what: str) -> FieldError:
    return FieldError(path, invalid(value if isinstance(value, (str, int, bool)) else str(value), f"must be {what}"))


def _unknown(path: str, obj: Mapping[str, Any], known: Sequence[str]) -> list[FieldError]:
    return [FieldError(f"{path}.{k}" if path else k, f"unknown field {quote(k)}") for k in obj if k not in known]


def no_backsteps_errors(path: str, value: str) -> list[FieldError]:
    """validatePathNoBacksteps: no '..' element."""
    if ".." in value.split("/"):
        return [FieldError(path, invalid(value, "must not contain '..'"))]
    return []


def local_descending_path_errors(path: str, value: str) -> list[FieldError]:
    """validateLocalDescendingPath: relative, without '..' (subPath, item paths)."""
    errs = []
    if value.startswith("/"):
        errs.append(FieldError(path, invalid(value, "must be a relative path")))
    return errs + no_backsteps_errors(path, value)


def _mode_errors(path: str, value: object) -> list[FieldError]:
    if value is None:
        return []
    if type(value) is not int or not 0 <= value <= MAX_MODE:
        return [FieldError(path, invalid(value if isinstance(value, (int, str)) else str(value), FILE_MODE_MSG))]
    return []


def _optional_bool(path: str, obj: Mapping[str, Any], key: str) -> list[FieldError]:
    v = obj.get(key)
    return [] if v is None or isinstance(v, bool) else [_type_error(f"{path}.{key}", v, "a boolean")]


def _list_objects(path: str, value: object, errs: list[FieldError]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each object of a list field with its path (`path[i]`); a value that is not a list, or an
    element that is not an object, is an error appended to `errs` (and not yielded)."""
    if value is None:
        return
    if not isinstance(value, list):
        errs.append(_type_error(path, value, "a list"))
        return
    for i, item in enumerate(value):
        if isinstance(item, dict):
            yield f"{path}[{i}]", item
        else:
            errs.append(_type_error(f"{path}[{i}]", item, "an object"))


def _items_errors(path: str, items: object) -> list[FieldError]:
    """validateKeyToPath for each item."""
    errs: list[FieldError] = []
    for where, item in _list_objects(path, items, errs):
        errs += _unknown(where, item, ("key", "path", "mode"))
        key, p = item.get("key"), item.get("path")
        if not key or not _is_str(key):
            errs.append(FieldError(f"{where}.key", "Required value"))
        if not p or not _is_str(p):
            errs.append(FieldError(f"{where}.path", "Required value"))
        else:
            errs += local_descending_path_errors(f"{where}.path", p)
        errs += _mode_errors(f"{where}.mode", item.get("mode"))
    return errs


def _object_source_errors(path: str, src: Mapping[str, Any], name_key: str, *, projected: bool) -> list[FieldError]:
    known = (name_key, "items", "optional") if projected else (name_key, "items", "optional", "defaultMode")
    errs = _unknown(path, src, known)
    name = src.get(name_key)
    if not name or not _is_str(name):
        errs.append(FieldError(f"{path}.{name_key}", "Required value"))
    else:
        errs += [FieldError(f"{path}.{name_key}", invalid(name, e)) for e in dns1123_subdomain_errors(name)]
    errs += _optional_bool(path, src, "optional")
    if not projected:
        errs += _mode_errors(f"{path}.defaultMode", src.get("defaultMode"))
    return errs + _items_errors(f"{path}.items", src.get("items"))


def _downward_errors(path: str, src: Mapping[str, Any], *, projected: bool) -> list[FieldError]:
    errs = _unknown(path, src, ("items",) if projected else ("items", "defaultMode"))
    if not projected:
        errs += _mode_errors(f"{path}.defaultMode", src.get("defaultMode"))
    for where, item in _list_objects(f"{path}.items", src.get("items") or [], errs):
        errs += _unknown(where, item, ("path", "fieldRef", "resourceFieldRef", "mode"))
        p = item.get("path")
        if not p or not _is_str(p):
            errs.append(FieldError(f"{where}.path", "Required value"))
        else:
            errs += local_descending_path_errors(f"{where}.path", p)
            if p.split("/")[0].startswith(".."):
                errs.append(FieldError(f"{where}.path", invalid(p, "must not start with '..'")))
        errs += _mode_errors(f"{where}.mode", item.get("mode"))
        refs = [k for k in ("fieldRef", "resourceFieldRef") if item.get(k) is not None]
        if len(refs) != 1:
            errs.append(FieldError(where, invalid("", "fieldRef and resourceFieldRef can not be specified "
                                                      "simultaneously" if refs else "must specify one of: "
                                                      "`fieldRef` or `resourceFieldRef`")))
            continue
        ref = item[refs[0]]
        if not isinstance(ref, dict):
            errs.append(_type_error(f"{where}.{refs[0]}", ref, "an object"))
        elif refs[0] == "fieldRef":
            errs += _unknown(f"{where}.fieldRef", ref, ("apiVersion", "fieldPath"))
            fp = ref.get("fieldPath")
            base = fp.split("[", 1)[0] if isinstance(fp, str) else ""
            if not fp or not _is_str(fp):
                errs.append(FieldError(f"{where}.fieldRef.fieldPath", "Required value"))
            elif base not in _FIELD_REFS:
                errs.append(FieldError(f"{where}.fieldRef.fieldPath", f"Unsupported value: {quote(fp)}: supported "
                                       f"values: {', '.join(quote(f) for f in _FIELD_REFS)}"))
        else:
            errs += _unknown(f"{where}.resourceFieldRef", ref, ("containerName", "resource", "divisor"))
            if not ref.get("containerName"):
                errs.append(FieldError(f"{where}.resourceFieldRef.containerName", "Required value"))
            if not ref.get("resource"):
                errs.append(FieldError(f"{where}.resourceFieldRef.resource", "Required value"))
    return errs


def _projected_errors(path: str, src: Mapping[str, Any]) -> list[FieldError]:
    errs = _unknown(path, src, ("sources", "defaultMode"))
    errs += _mode_errors(f"{path}.defaultMode", src.get("defaultMode"))
    for where, s in _list_objects(f"{path}.sources", src.get("sources") or [], errs):
        kinds = ("configMap", "secret", "downwardAPI", "serviceAccountToken", "clusterTrustBundle")
        errs += _unknown(where, s, kinds)
        present = [k for k in kinds if s.get(k) is not None]
        if len(present) != 1:
            errs.append(FieldError(where, "Forbidden: may not specify more than 1 volume type" if present
                                   else "Required value: must specify at least 1 volume type"))
            continue
        kind, inner = present[0], s[present[0]]
        if not isinstance(inner, dict):
            errs.append(_type_error(f"{where}.{kind}", inner, "an object"))
        elif kind in ("configMap", "secret"):
            errs += _object_source_errors(f"{where}.{kind}", inner, "name", projected=True)
        elif kind == "downwardAPI":
            errs += _downward_errors(f"{where}.downwardAPI", inner, projected=True)
    return errs


def _source_errors(path: str, kind: str, src: object) -> list[FieldError]:
    where = f"{path}.{kind}"
    if not isinstance(src, dict):
        return [_type_error(where, src, "an object")]
    if kind == "emptyDir":
        errs = _unknown(where, src, ("medium", "sizeLimit"))
        medium = src.get("medium", "")
        if not isinstance(medium, str):
            errs.append(_type_error(f"{where}.medium", medium, "a string"))
        limit = src.get("sizeLimit")
        if limit is not None:
            try:
                q = parse_quantity(str(limit)) if isinstance(limit, (str, int)) else None
            except ValueError:
                q = None
            if q is None or q < _ZERO:
                errs.append(FieldError(f"{where}.sizeLimit", "Forbidden: SizeLimit field must be a valid resource "
                                                             "quantity"))
        return errs
    if kind == "hostPath":
        errs = _unknown(where, src, ("path", "type"))
        p = src.get("path")
        if not p or not _is_str(p):
            errs.append(FieldError(f"{where}.path", "Required value"))
        else:
            errs += no_backsteps_errors(f"{where}.path", p)
        t = src.get("type", "")
        if t is not None and t not in HOST_PATH_TYPES:
            errs.append(FieldError(f"{where}.type", f"Unsupported value: {quote(t)}: supported values: "
                                                     f"{', '.join(quote(v) for v in HOST_PATH_TYPES)}"))
        return errs
    if kind == "configMap":
        return _object_source_errors(where, src, "name", projected=False)
    if kind == "secret":
        return _object_source_errors(where, src, "secretName", projected=False)
    if kind == "downwardAPI":
        return _downward_errors(where, src, projected=False)
    if kind == "projected":
        return _projected_errors(where, src)
    return []  # the other types: the API's checks of them are not repeated here (this node refuses them)


def volume_errors(volumes: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], list[FieldError]]:
    """({volume name: its type}, errors) for spec.volumes."""
    errs: list[FieldError] = []
    names: dict[str, str] = {}
    for i, v in enumerate(volumes):
        path = f"spec.volumes[{i}]"
        errs += _unknown(path, v, ("name", *VOLUME_TYPES))
        name = v.get("name")
        if not name or not _is_str(name):
            errs.append(FieldError(f"{path}.name", "Required value"))
            name = None
        elif label_errs := dns1123_label_errors(name):
            errs += [FieldError(f"{path}.name", invalid(name, e)) for e in label_errs]
        elif name in names:
            errs.append(FieldError(f"{path}.name", f"Duplicate value: {quote(name)}"))
        kinds = [k for k in VOLUME_TYPES if v.get(k) is not None]
        if not kinds:
            errs.append(FieldError(path, "Required value: must specify a volume type"))
            continue
        if len(kinds) > 1:
            errs.append(FieldError(f"{path}.{kinds[1]}", "Forbidden: may not specify more than 1 volume type"))
            continue
        errs += _source_errors(path, kinds[0], v[kinds[0]])
        if name is not None and name not in names:
            names[name] = kinds[0]
    return names, errs


def mount_errors(path: str, mounts: Sequence[Mapping[str, Any]], volumes: Mapping[str, str]) -> list[FieldError]:
    """ValidateVolumeMounts for one container's volumeMounts (`path`: the container's field path)."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, m in enumerate(mounts):
        where = f"{path}.volumeMounts[{i}]"
        errs += _unknown(where, m, MOUNT_FIELDS)
        name = m.get("name")
        if not name or not _is_str(name):
            errs.append(FieldError(f"{where}.name", "Required value"))
        elif name not in volumes:
            errs.append(FieldError(f"{where}.name", f"Not found: {quote(name)}"))
        mp = m.get("mountPath")
        if not mp or not _is_str(mp):
            errs.append(FieldError(f"{where}.mountPath", "Required value"))
        else:
            if mp in seen:
                errs.append(FieldError(f"{where}.mountPath", invalid(mp, "must be unique")))
            seen.add(mp)
            if "\0" in mp:
                errs.append(FieldError(f"{where}.mountPath", invalid(mp, "must not contain NUL")))
        errs += _optional_bool(where, m, "readOnly")
        for key in ("subPath", "subPathExpr"):
            sp = m.get(key)
            if sp is None:
                continue
            if not isinstance(sp, str):
                errs.append(_type_error(f"{where}.{key}", sp, "a string"))
            elif sp:
                errs += local_descending_path_errors(f"{where}.{key}", sp)
        if m.get("subPath") and m.get("subPathExpr"):
            errs.append(FieldError(f"{where}.subPathExpr", invalid(m["subPathExpr"], "subPathExpr and subPath are "
                                                                                     "mutually exclusive")))
        prop = m.get("mountPropagation")
        if prop is not None and prop not in MOUNT_PROPAGATIONS:
            errs.append(FieldError(f"{where}.mountPropagation", f"Unsupported value: {quote(prop)}: supported "
                                   f"values: {', '.join(quote(p) for p in MOUNT_PROPAGATIONS)}"))
    return errs


# ---- the typed view (of validated data) ----
def _items(raw: object) -> tuple[KeyToPath, ...]:
    return tuple(KeyToPath(str(i["key"]), str(i["path"]), i.get("mode")) for i in raw or ())  # type: ignore[attr-defined]


def _downward_files(src: Mapping[str, Any]) -> tuple[DownwardFile, ...]:
    out = []
    for item in src.get("items") or ():
        fr, rr = item.get("fieldRef"), item.get("resourceFieldRef")
        if fr is not None:
            out.append(DownwardFile(item["path"], field_path=fr["fieldPath"], mode=item.get("mode")))
        else:
            divisor = rr.get("divisor")
            out.append(DownwardFile(item["path"], container_name=rr["containerName"], resource=rr["resource"],
                                    divisor=str(divisor) if divisor is not None else None, mode=item.get("mode")))
    return tuple(out)


def _projection(kind: str, src: Mapping[str, Any]) -> Projection:
    if kind == "downwardAPI":
        return Projection(kind, files=_downward_files(src))
    name = src.get("secretName" if kind == "secret" and "secretName" in src else "name") or ""
    return Projection(kind, str(name), _items(src.get("items")), bool(src.get("optional", False)))


def parse_volume(v: Mapping[str, Any]) -> Volume:
    """The typed view of one validated volume (volume_errors found nothing)."""
    kind = next(k for k in VOLUME_TYPES if v.get(k) is not None)
    src = v[kind]
    name = str(v["name"])
    if kind == "emptyDir":
        limit = src.get("sizeLimit")
        return Volume(name, kind, medium=src.get("medium") or "",
                      size_limit=parse_quantity(str(limit)) if limit is not None else None, raw=v)
    if kind == "hostPath":
        return Volume(name, kind, host_path=posixpath.normpath(src["path"]), host_path_type=src.get("type") or "",
                      raw=v)
    mode = src.get("defaultMode")
    default_mode = DEFAULT_MODE if mode is None else int(mode)
    if kind in ("configMap", "secret", "downwardAPI"):
        return Volume(name, kind, default_mode=default_mode, projections=(_projection(kind, src),), raw=v)
    if kind == "projected":
        projections = tuple(_projection(k, s[k]) for s in src.get("sources") or ()
                            for k in ("configMap", "secret", "downwardAPI") if s.get(k) is not None)
        return Volume(name, kind, default_mode=default_mode, projections=projections, raw=v)
    return Volume(name, kind, raw=v)


def parse_mount(m: Mapping[str, Any]) -> VolumeMount:
    """The typed view of one validated volumeMount."""
    return VolumeMount(str(m["name"]), str(m["mountPath"]), bool(m.get("readOnly", False)),
                       str(m.get("subPath") or ""), str(m.get("subPathExpr") or ""), m.get("mountPropagation"))
