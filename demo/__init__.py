"""`make demo`: a real (tiny) job failed over on this machine (`training`), the serving
demo (`serving`), and the identity proxy the demo puts in front of the Prefect UI (`proxy`)."""
