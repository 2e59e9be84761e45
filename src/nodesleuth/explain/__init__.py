"""Time travel: rebuild incident -> hot core -> process -> function -> resource -> creator -> unit -> fix."""
