"""Instance policies on the command line: the options of ``gnt-cluster init|modify``
and ``gnt-group add|modify`` (Ganeti's names and syntaxes), turned into an opcode's
``ipolicy``, and the policy as ``gnt-cluster info`` and ``gnt-group info`` show it.

- ``--ipolicy-bounds-specs min:cpu-count=1,.../max:...//min:.../max:...``: the list
  of min/max pairs; each spec names all six parameters (sizes take units, ``4G``);
- ``--ipolicy-std-specs cpu-count=1,...`` (cluster only): the standard instance;
- ``--ipolicy-disk-templates T,...``, ``--ipolicy-vcpu-ratio N``,
  ``--ipolicy-spindle-ratio N``;
- ``--specs-cpu-count min=1,max=8,std=1`` and its siblings (``init`` only): one
  parameter's min, max and std at once; they cannot be mixed with the two
  ``--ipolicy-*-specs`` options.

At group level ``default`` as a value drops the group's own setting (the cluster's
applies again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from corral.cli.keyval import parse_keyval, parse_multilist_ident_keyval
from corral.errors import ParameterError
from corral.objects.ipolicy import (
    DEFAULT_MINMAX,
    DEFAULT_STD,
    MINMAX_KEYS,
    SPEC_PARAMETERS,
)
from corral.objects.params import VALUE_DEFAULT, parse_size

__all__ = ["SPLIT_OPTIONS", "format_policy", "ipolicy_from_options", "ipolicy_options"]

F = TypeVar("F", bound=Callable[..., Any])

#: ``--specs-*`` option -> the spec parameter it sets (``init`` only, as in Ganeti).
SPLIT_OPTIONS: Mapping[str, str] = {
    "specs_cpu_count": "cpu-count", "specs_disk_count": "disk-count",
    "specs_disk_size": "disk-size", "specs_mem_size": "memory-size",
    "specs_nic_count": "nic-count",
}
_SIZES = ("disk-size", "memory-size")


def ipolicy_options(*, std: bool, split: bool = False) -> Callable[[F], F]:
    """Add the policy options: ``std`` for ``--ipolicy-std-specs`` (cluster level),
    ``split`` for the ``--specs-*`` options (``init``)."""
    options: list[Callable[[F], F]] = []
    if split:
        for name, param in SPLIT_OPTIONS.items():
            flag = "--" + name.replace("_", "-")
            options.append(click.option(
                flag, name, metavar="min=N,max=N,std=N",
                help=f"The {param} of the instance policy: its min, max and std values"
                     + (" (sizes take a unit, e.g. 4G)." if param in _SIZES else ".")))
    if std:
        options.append(click.option(
            "--ipolicy-std-specs", "ipolicy_std_specs", metavar="SPEC=VALUE,...",
            help="The standard instance of the policy (capacity planning counts it): "
                 + ", ".join(SPEC_PARAMETERS) + "."))
    options += [
        click.option("--ipolicy-bounds-specs", "ipolicy_bounds_specs",
                     metavar="min:SPEC=V,.../max:SPEC=V,...[//...]",
                     help="Minimum and maximum instance specs (all six parameters each); "
                          "'//' separates further min/max pairs."),
        click.option("--ipolicy-disk-templates", "ipolicy_disk_templates",
                     metavar="TEMPLATE,...",
                     help="Disk templates instances may use (a subset of the enabled ones)."),
        click.option("--ipolicy-vcpu-ratio", "ipolicy_vcpu_ratio", metavar="RATIO",
                     help="How many virtual CPUs a physical CPU may carry."),
        click.option("--ipolicy-spindle-ratio", "ipolicy_spindle_ratio", metavar="RATIO",
                     help="How many instances a spindle may carry."),
    ]

    def decorate(func: F) -> F:
        for option in reversed(options):
            func = option(func)
        return func
    return decorate


def _spec_value(option: str, name: str, value: Any) -> int:
    if not isinstance(value, str):
        raise ParameterError(f"{option}: {name} needs a value, as in {name}=4")
    if name in _SIZES:
        try:
            return parse_size(value)
        except ParameterError as err:
            raise ParameterError(f"Invalid parameter {name} ({value}) in {option}: "
                                 f"{err.message}") from None
    try:
        return int(value)
    except ValueError:
        raise ParameterError(f"{option}: {name} must be a whole number, got "
                             f"{value!r}") from None


def _parse_spec(option: str, where: str, values: Mapping[str, Any], *,
                required: bool) -> dict[str, int]:
    unknown = sorted(set(values) - set(SPEC_PARAMETERS))
    if unknown:
        raise ParameterError(f"{option}: unknown parameter(s) {', '.join(unknown)} in "
                             f"{where}; valid: {', '.join(SPEC_PARAMETERS)}")
    spec = {name: _spec_value(option, name, value) for name, value in values.items()}
    missing = [name for name in SPEC_PARAMETERS if name not in spec]
    if required and missing:
        raise ParameterError(f"Missing parameters in ipolicy spec {where}: "
                             f"{', '.join(missing)}")
    return spec


def _bounds(text: str, *, group: bool) -> list[dict[str, dict[str, int]]] | str:
    option = "--ipolicy-bounds-specs"
    if group and text.strip() == VALUE_DEFAULT:
        return VALUE_DEFAULT
    pairs = parse_multilist_ident_keyval(option, text)
    result: list[dict[str, dict[str, int]]] = []
    for pair in pairs:
        wrong = sorted(set(pair) - set(MINMAX_KEYS))
        if wrong:
            raise ParameterError(f"Invalid key in bounds instance specifications: "
                                 f"{', '.join(wrong)}")
        result.append({key: _parse_spec(option, key, values, required=True)
                       for key, values in pair.items()})
    return result


def _ratio(option: str, text: str, *, group: bool) -> float | str:
    if group and text.strip() == VALUE_DEFAULT:
        return VALUE_DEFAULT
    try:
        return float(text)
    except ValueError:
        raise ParameterError(f"{option}: expected a number"
                             + (" or 'default'" if group else "") + f", got {text!r}") from None


def _split_specs(kw: Mapping[str, Any]) -> dict[str, Any]:
    """The policy the ``--specs-*`` options give, filled with Ganeti's defaults."""
    specs: dict[str, dict[str, int]] = {"min": {}, "max": {}, "std": {}}
    for name, param in SPLIT_OPTIONS.items():
        text = kw.get(name)
        if text is None:
            continue
        option = "--" + name.replace("_", "-")
        for key, value in parse_keyval(option, text, parse_prefixes=False).items():
            if key not in specs:
                raise ParameterError(f"{option}: unknown key {key!r}; valid: min, max, std")
            specs[key][param] = _spec_value(option, param, value)
    return {"minmax": [{key: {**DEFAULT_MINMAX[key], **specs[key]} for key in MINMAX_KEYS}],
            "std": {**DEFAULT_STD, **specs["std"]}}


def ipolicy_from_options(kw: Mapping[str, Any], *, group: bool) -> dict[str, Any] | None:
    """The ``ipolicy`` of the opcode from the parsed options (None: none given)."""
    policy: dict[str, Any] = {}
    split = any(kw.get(name) is not None for name in SPLIT_OPTIONS)
    full = kw.get("ipolicy_bounds_specs") is not None or kw.get("ipolicy_std_specs") is not None
    if split and full:
        raise ParameterError("A --specs-xxx option cannot be specified together with any "
                             "--ipolicy-xxx-specs option")
    if split:
        policy.update(_split_specs(kw))
    if kw.get("ipolicy_bounds_specs") is not None:
        policy["minmax"] = _bounds(kw["ipolicy_bounds_specs"], group=group)
    if kw.get("ipolicy_std_specs") is not None:
        policy["std"] = _parse_spec("--ipolicy-std-specs", "std", parse_keyval(
            "--ipolicy-std-specs", kw["ipolicy_std_specs"], parse_prefixes=False),
            required=False)
    if kw.get("ipolicy_disk_templates") is not None:
        templates = [t.strip() for t in kw["ipolicy_disk_templates"].split(",") if t.strip()]
        policy["disk-templates"] = templates
    for key in ("vcpu-ratio", "spindle-ratio"):
        option = "ipolicy_" + key.replace("-", "_")
        if kw.get(option) is not None:
            policy[key] = _ratio("--ipolicy-" + key, kw[option], group=group)
    return policy or None


def format_policy(custom: Mapping[str, Any], effective: Mapping[str, Any], *,
                  cluster: bool) -> list[tuple[str, Any]]:
    """A policy for :func:`~corral.cli.output.format_info`, in Ganeti's layout: the
    bounds pairs (``min/0``, ``max/0``, ...), at cluster level ``std``, the allowed
    disk templates and the ratios; a group's inherited values read ``default (V)``."""
    if cluster:
        effective = custom
    own_pairs = custom.get("minmax")
    pairs = own_pairs or effective.get("minmax", [])
    bounds = [[(f"{key}/{index}", {name: str(value) if own_pairs else f"default ({value})"
                                   for name, value in pair[key].items()})
               for key in MINMAX_KEYS]
              for index, pair in enumerate(pairs)]
    result: list[tuple[str, Any]] = [("bounds specs", bounds)]
    if cluster:
        result.append(("std", {name: str(value) for name, value in custom["std"].items()}))
    templates = custom.get("disk-templates")
    result.append(("allowed disk templates", ", ".join(templates) if templates is not None
                   else f"default ({', '.join(effective.get('disk-templates', []))})"))
    for key in ("spindle-ratio", "vcpu-ratio"):
        result.append((key, str(custom[key]) if key in custom
                       else f"default ({effective.get(key)})"))
    return result
