"""The partition drill (`lifeboat drill RUNBOOK --kind partition`): network namespaces, root.

`drill` builds the hosts (`netns`) and runs what each does (`sites`: the primary's store and
trainer, one probe round from a vantage; `control`: detection and the failover from the
control plane's namespace; `checks`: what proves it). It ships with the package, so an
installed Lifeboat runs it; its primary's S3 store is moto's server (`moto_server`, from
`moto[server,s3]`), found beside this interpreter.
"""
