"""``ray_cluster.yaml`` through what ``ray up`` does before it launches anything: Ray's own
validation and its AWS bootstrap (IAM role and profile, key pair, subnets, security group,
image), against moto's server on loopback standing in for IAM, EC2 and S3; the worker role
created from ``cluster/*.json`` with the commands docs/cluster.md gives."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from helpers import ROOT
from servers import MotoServer

IMAGE = "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"


@pytest.fixture
def aws(tmp_path, monkeypatch):
    """moto's server with boto3 pointed at it (Ray's AWS launcher builds its clients with boto3)."""
    server = MotoServer()
    server.start({**os.environ, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})  # Ray attaches AWS managed policies
    env = {**server.env(), "AWS_DEFAULT_REGION": "us-west-2", "HOME": str(tmp_path)}  # the key pair goes to ~/.ssh
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield server
    server.stop()


def create_worker_role(bucket: str) -> str:
    """What docs/cluster.md's `aws iam` commands do, with the repository's policy documents."""
    import boto3

    iam = boto3.client("iam")
    trust = (ROOT / "cluster" / "ec2-trust-policy.json").read_text()
    policy = (ROOT / "cluster" / "worker-role-policy.json").read_text().replace("CHANGE-ME-bucket", bucket)
    iam.create_role(RoleName="syntax-nmt-worker", AssumeRolePolicyDocument=trust)
    iam.put_role_policy(RoleName="syntax-nmt-worker", PolicyName="syntax-nmt-bucket", PolicyDocument=policy)
    iam.create_instance_profile(InstanceProfileName="syntax-nmt-worker")
    iam.add_role_to_instance_profile(InstanceProfileName="syntax-nmt-worker", RoleName="syntax-nmt-worker")
    return iam.get_instance_profile(InstanceProfileName="syntax-nmt-worker")["InstanceProfile"]["Arn"]


def test_the_cluster_file_bootstraps_on_aws_as_ray_up_would(aws):
    import boto3
    from ray_private import bootstrap_aws_cluster

    config = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())
    create_worker_role("my-bucket")
    done = bootstrap_aws_cluster(config, propagation_waits=False)  # moto: no eventual consistency to wait for
    head, worker = (done["available_node_types"][name]["node_config"] for name in ("head", "gpu_worker"))
    # the image: the current Deep Learning Base AMI through AWS's public parameter, never Ray's old DLAMI
    assert head["ImageId"] == worker["ImageId"] == IMAGE
    assert done["docker"]["worker_image"] == "rayproject/ray:2.60.0-py311-gpu"
    assert done["docker"]["head_image"].startswith("rayproject/ray:2.60.0-py311")
    # the head got Ray's role (it launches the workers); the workers keep the profile we made
    assert done["head_node"]["IamInstanceProfile"]["Arn"].endswith("instance-profile/ray-autoscaler-v1")
    assert "IamInstanceProfile" not in head
    assert worker["IamInstanceProfile"] == {"Name": "syntax-nmt-worker"}
    ec2 = boto3.client("ec2")
    # one security group for the cluster: SSH from outside, everything else within the group only
    (group_id,) = set(head["SecurityGroupIds"]) | set(worker["SecurityGroupIds"])
    group = ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]
    rules = group["IpPermissions"]
    outside = [r for r in rules if any(ip["CidrIp"] == "0.0.0.0/0" for ip in r.get("IpRanges", []))]
    assert [(r["FromPort"], r["ToPort"]) for r in outside] == [(22, 22)]
    assert any(pair["GroupId"] == group_id for r in rules for pair in r.get("UserIdGroupPairs", []))
    # subnets of the default VPC, and the key pair written where ray up reads it
    assert head["SubnetIds"] and worker["SubnetIds"]
    assert Path(done["auth"]["ssh_private_key"]).expanduser().is_file()


def test_the_worker_policy_grants_the_bucket_and_nothing_else():
    policy = json.loads((ROOT / "cluster" / "worker-role-policy.json").read_text())
    resources = {r for statement in policy["Statement"] for r in [statement["Resource"]]}
    assert resources == {"arn:aws:s3:::CHANGE-ME-bucket", "arn:aws:s3:::CHANGE-ME-bucket/*"}
    actions = {a for statement in policy["Statement"] for a in statement["Action"]}
    assert actions == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:GetBucketLocation"}
    passing = json.loads((ROOT / "cluster" / "head-pass-role-policy.json").read_text())["Statement"][0]
    assert passing["Action"] == "iam:PassRole" and passing["Resource"].endswith(":role/syntax-nmt-worker")
    worker = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())["available_node_types"]["gpu_worker"]
    assert worker["node_config"]["IamInstanceProfile"]["Name"] == "syntax-nmt-worker"


def test_the_cluster_extra_brings_what_ray_up_needs():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(req.startswith("boto3") for req in project["optional-dependencies"]["cluster"])
    import boto3  # installed here (moto brings it too): Ray's AWS provider imports it
    from packaging.version import Version

    assert Version(boto3.__version__) >= Version("1.29")  # reads AWS_ENDPOINT_URL
