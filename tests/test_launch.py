from commbench.measure.launch import detect


def test_single():
    info = detect({})
    assert (info.launcher, info.rank, info.size) == ("single", 0, 1)


def test_openmpi():
    env = {
        "OMPI_COMM_WORLD_RANK": "3",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == (
        "openmpi",
        3,
        8,
        1,
        2,
    )
    assert info.is_mpi


def test_mpich_pmi():
    info = detect(
        {"PMI_RANK": "5", "PMI_SIZE": "6", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"}
    )
    assert (info.launcher, info.rank, info.size, info.local_rank) == ("pmi", 5, 6, 1)


def test_slurm():
    info = detect(
        {
            "SLURM_PROCID": "7",
            "SLURM_NTASKS": "16",
            "SLURM_LOCALID": "3",
            "SLURM_NTASKS_PER_NODE": "8(x2)",
        }
    )
    assert (info.launcher, info.rank, info.size, info.local_rank, info.local_size) == (
        "slurm",
        7,
        16,
        3,
        8,
    )


def test_torchrun():
    env = {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "TORCHELASTIC_RUN_ID": "x",
    }
    info = detect(env)
    assert (info.launcher, info.rank, info.size) == ("torchrun", 1, 4)
    assert not info.is_mpi


def test_stray_rank_variable_is_not_torchrun():
    assert detect({"RANK": "3", "WORLD_SIZE": "4"}).launcher == "single"
