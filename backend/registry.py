"""Named plugin registries (estimators, renderers): name -> factory.

Built-in plugins are registered by *module path and attribute*
(``".embedded:EmbeddedEstimator"``, relative to the registry's package), so the
registry imports a plugin's module only when that plugin is created: listing names
loads nothing heavy, and no base module imports its plugins (no import cycle).
Relative paths keep the one import identity of the backend (inside Blender the
package is ``<extension>.backend``).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, List, Optional, Union

Factory = Union[Callable[..., Any], str]


class Registry:
    """Factories by name.

    Args:
        kind: what is registered (``"estimator"``), for messages.
        package: the package relative module paths are resolved in (``__package__``).
        builtins: name -> factory or ``"module:attribute"`` path.
    """

    def __init__(self, kind: str, package: str, builtins: Optional[Dict[str, Factory]] = None):
        self.kind = kind
        self.package = package
        self._factories: Dict[str, Factory] = dict(builtins or {})

    def register(self, name: str, factory: Factory) -> None:
        """Register ``factory(**options)`` (a callable or a ``"module:attribute"`` path)
        under ``name``, replacing an earlier one."""
        self._factories[name] = factory

    def names(self) -> List[str]:
        """Registered names, sorted."""
        return sorted(self._factories)

    def factory(self, name: str) -> Callable[..., Any]:
        """The factory of ``name`` (its module is imported now when given as a path).

        Raises:
            KeyError: unknown name (the message lists the known ones).
        """
        if not isinstance(name, str):
            from .arguments import ArgumentError

            raise ArgumentError(f"{self.kind} must be a name (str), got {name!r} ({type(name).__name__})")
        if name not in self._factories:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        f = self._factories[name]
        if isinstance(f, str):
            module, _, attr = f.partition(":")
            f = getattr(importlib.import_module(module, self.package), attr)
        return f

    def create(self, name: str, **options) -> Any:
        """``factory(**options)`` of ``name``.

        Raises:
            KeyError: unknown name.
            ValueError: an option the factory does not take (one line naming it and the
                options it takes; issue 36: was a ``TypeError``, exit 1 on the CLI).
            Whatever else the factory raises.
        """
        factory = self.factory(name)
        try:
            return factory(**options)
        except TypeError as e:  # a factory's own words for an option it does not take
            text = str(e).splitlines()[0] if str(e) else ""
            if options and ("unexpected keyword" in text or "unknown option" in text
                            or any(repr(k) in text for k in options)):
                raise ValueError(f"{self.kind} {name!r} takes no option "
                                 f"{', '.join(k for k in options if k in text) or ', '.join(options)}: "
                                 f"{text}") from None
            raise
