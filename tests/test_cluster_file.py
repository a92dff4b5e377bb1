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
from helpers import ROOT, worker_may_write
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


MY_CIDR = "203.0.113.7/32"  # where the user works from (docs/cluster.md: MY_CIDR)


def create_roles_and_group(bucket: str) -> str:
    """What docs/cluster.md's step 3 does (through boto3), with the repository's policy
    documents: the head's and the workers' roles and instance profiles, and the security group
    (SSH from ``MY_CIDR``, everything else between its members); returns the group's id."""
    import boto3

    iam, ec2 = boto3.client("iam"), boto3.client("ec2")
    trust = (ROOT / "cluster" / "ec2-trust-policy.json").read_text()
    for role in ("head", "worker"):
        policy = (ROOT / "cluster" / f"{role}-role-policy.json").read_text().replace("CHANGE-ME-bucket", bucket)
        iam.create_role(RoleName=f"syntax-nmt-{role}", AssumeRolePolicyDocument=trust)
        iam.put_role_policy(RoleName=f"syntax-nmt-{role}", PolicyName="syntax-nmt", PolicyDocument=policy)
        iam.create_instance_profile(InstanceProfileName=f"syntax-nmt-{role}")
        iam.add_role_to_instance_profile(InstanceProfileName=f"syntax-nmt-{role}", RoleName=f"syntax-nmt-{role}")
    group = ec2.create_security_group(GroupName="syntax-nmt", Description="syntax-nmt cluster")["GroupId"]
    ec2.authorize_security_group_ingress(GroupId=group, IpProtocol="tcp", FromPort=22, ToPort=22, CidrIp=MY_CIDR)
    ec2.authorize_security_group_ingress(GroupId=group, IpPermissions=[
        {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}])
    return group


def test_the_cluster_file_bootstraps_on_aws_as_ray_up_would(aws):
    import boto3
    from ray_private import bootstrap_aws_cluster

    text = (ROOT / "ray_cluster.yaml").read_text()
    group = create_roles_and_group("my-bucket")
    assert text.count("CHANGE-ME-security-group") == 1  # one place to set it (a YAML anchor for both nodes)
    config = yaml.safe_load(text.replace("CHANGE-ME-security-group", group))
    done = bootstrap_aws_cluster(config, propagation_waits=False)  # moto: no eventual consistency to wait for
    head, worker = (done["available_node_types"][name]["node_config"] for name in ("head", "gpu_worker"))
    # the image: the current Deep Learning Base AMI through AWS's public parameter, never Ray's old DLAMI
    assert head["ImageId"] == worker["ImageId"] == IMAGE
    assert done["docker"]["worker_image"] == "rayproject/ray:2.60.0-py311-gpu"
    assert done["docker"]["head_image"].startswith("rayproject/ray:2.60.0-py311")
    # each node its own role: not Ray's default one for the head (all of EC2 and S3), which ray up
    # therefore never makes
    assert head["IamInstanceProfile"] == {"Name": "syntax-nmt-head"}
    assert worker["IamInstanceProfile"] == {"Name": "syntax-nmt-worker"}
    roles = {r["RoleName"] for r in boto3.client("iam").list_roles()["Roles"]}
    assert "ray-autoscaler-v1" not in roles
    ec2 = boto3.client("ec2")
    # the user's security group, as made: SSH from their CIDR only, everything else within the group
    assert head["SecurityGroupIds"] == worker["SecurityGroupIds"] == [group]
    rules = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissions"]
    outside = [(r["FromPort"], r["ToPort"], ip["CidrIp"]) for r in rules for ip in r.get("IpRanges", [])]
    assert outside == [(22, 22, MY_CIDR)]
    assert [pair["GroupId"] for r in rules for pair in r.get("UserIdGroupPairs", [])] == [group]
    assert not [g for g in ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"].startswith("ray-")]
    # subnets of the default VPC, and the key pair written where ray up reads it
    assert head["SubnetIds"] and worker["SubnetIds"]
    assert Path(done["auth"]["ssh_private_key"]).expanduser().is_file()
    # Ray's token authentication on every node: the token copied from the laptop, both start
    # commands and every shell (the drivers on the head) in token mode
    assert done["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    starts = [*done["head_start_ray_commands"], *done["worker_start_ray_commands"]]
    assert [c for c in starts if "ray start" in c] and all("RAY_AUTH_MODE=token ray start" in c
                                                           for c in starts if "ray start" in c)
    assert "RAY_AUTH_MODE=token" in " ".join(done["setup_commands"])


def test_the_head_role_may_launch_workers_and_use_the_bucket_and_nothing_else():
    policy = json.loads((ROOT / "cluster" / "head-role-policy.json").read_text())
    actions = {a for statement in policy["Statement"] for a in
               ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])}
    assert {a.split(":")[0] for a in actions} == {"ec2", "ssm", "iam", "s3"}
    assert not [a for a in actions if "*" in a]  # named actions only: no ec2:*, s3:*
    # EC2 changes only to this cluster's own instances: every mutating EC2 action is on named
    # resource types and, where it touches an instance, conditioned on the cluster's tag, which
    # Ray's AWS provider sets at launch (code on the head cannot stop or terminate anything else)
    cluster = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())["cluster_name"]
    for statement in policy["Statement"]:
        named = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        mutating = [a for a in named if a.startswith("ec2:") and not a.startswith("ec2:Describe")]
        resources = [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
        if not mutating:
            continue
        assert "*" not in resources, f"{statement['Sid']}: {mutating} on every resource"
        condition = statement.get("Condition", {}).get("StringEquals", {})
        if any(":instance/" in r for r in resources):
            assert (condition.get("ec2:ResourceTag/ray-cluster-name") == cluster
                    or condition.get("aws:RequestTag/ray-cluster-name") == cluster
                    or condition.get("ec2:CreateAction") == "RunInstances"), statement["Sid"]
            if condition.get("aws:RequestTag/ray-cluster-name") or condition.get("ec2:CreateAction"):
                assert mutating in (["ec2:RunInstances"], ["ec2:CreateTags"]), statement["Sid"]  # launch only
    assert {a for a in actions if a.startswith("iam:")} == {"iam:PassRole"}
    passing = next(s for s in policy["Statement"] if s["Action"] == "iam:PassRole")
    assert passing["Resource"].endswith(":role/syntax-nmt-worker")
    buckets = {r for s in policy["Statement"] if "s3:GetObject" in s["Action"] or "s3:ListBucket" in s["Action"]
               for r in [s["Resource"]]}
    assert buckets == {"arn:aws:s3:::CHANGE-ME-bucket", "arn:aws:s3:::CHANGE-ME-bucket/*"}
def test_the_worker_policy_grants_the_bucket_and_nothing_else():
    policy = json.loads((ROOT / "cluster" / "worker-role-policy.json").read_text())
    allowed = [statement for statement in policy["Statement"] if statement["Effect"] == "Allow"]
    resources = {r for statement in allowed for r in [statement["Resource"]]}
    assert resources == {"arn:aws:s3:::CHANGE-ME-bucket", "arn:aws:s3:::CHANGE-ME-bucket/*"}
    actions = {a for statement in allowed for a in statement["Action"]}
    assert actions == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:GetBucketLocation"}
    # what the head unpickles on --resume, and the database backups, workers may not write
    # (the smoke sweep's test checks every file a real sweep writes against this)
    assert not worker_may_write("syntax-nmt/ray/s1/tuner.pkl")
    assert not worker_may_write("syntax-nmt/ray/s1/experiment_state-2026-11-27_09-59-59.json")
    assert not worker_may_write("syntax-nmt/backups/mlflow-20261127T100000Z.dump")
    # pickles Tune reads back that a sweep without errors never writes: a failed trial's error,
    # callbacks' state (every pickle under the storage root)
    assert not worker_may_write("syntax-nmt/ray/s1/run_trial_3f2a_00001/error.pkl")
    assert not worker_may_write("syntax-nmt/ray/s1/callback-states-2026-11-27_09-59-59.pkl")
    assert worker_may_write("syntax-nmt/ray/s1-2b0796a3/checkpoint_000001/checkpoint.pt")
    assert worker_may_write("syntax-nmt/mlflow/1/models/m-1/artifacts/data/model.pt")
    worker = yaml.safe_load((ROOT / "ray_cluster.yaml").read_text())["available_node_types"]["gpu_worker"]
    assert worker["node_config"]["IamInstanceProfile"]["Name"] == "syntax-nmt-worker"


def test_the_cluster_extra_brings_what_ray_up_needs():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(req.startswith("boto3") for req in project["optional-dependencies"]["cluster"])
    import boto3  # installed here (moto brings it too): Ray's AWS provider imports it
    from packaging.version import Version

    assert Version(boto3.__version__) >= Version("1.29")  # reads AWS_ENDPOINT_URL
