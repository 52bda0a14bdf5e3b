import pulumi, pulumi_aws as aws
class ClusterComponent(pulumi.ComponentResource):
    def __init__(self, name, cluster, opts=None):
        super().__init__("gpu-cluster:aws:Cluster", name, None, opts)
        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=str(cluster.spec.network.cidr), enable_dns_hostnames=True, tags=cluster.tags, opts=pulumi.ResourceOptions(parent=self))
        sub = aws.ec2.Subnet(f"{name}-subnet", vpc_id=vpc.id, cidr_block="10.40.0.0/17", availability_zone=cluster.spec.zone, opts=pulumi.ResourceOptions(parent=self, protect=True))
        ident = aws.get_caller_identity_output()
        self.exports = {"vpc_id": vpc.id, "subnet_id": sub.id, "account": ident.account_id}
        self.register_outputs(self.exports)
