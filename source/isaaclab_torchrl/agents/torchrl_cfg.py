"""Configuration classes of the TorchRL recurrent PPO runner.

They follow the layout of rsl_rl's ``RslRlOnPolicyRunnerCfg`` so that a config ports field by field, and
they are Isaac Lab ``@configclass`` dataclasses, so every field can be overridden from the command line
(``agent.algorithm.learning_rate=3e-4``).
"""

from __future__ import annotations

from dataclasses import MISSING

from isaaclab.utils import configclass

RNN_TYPES = ("lstm", "gru")
RECURRENT_BACKENDS = ("auto", "pad", "fused")
SPEEDS = ("auto", "off")
NOISE_STD_TYPES = ("scalar", "log")
ACTIVATIONS = ("elu", "relu", "tanh", "selu", "leakyrelu", "gelu", "silu")
SCHEDULES = ("adaptive", "fixed")
DISTILLATION_LOSSES = ("mse", "huber")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
"""rsl_rl's optimizers (``torch.optim.Adam``, ``AdamW``, ``SGD``, ``RMSprop``, each with its defaults but the learning
rate)."""
CNN_PADDINGS = ("none", "zeros", "reflect", "replicate", "circular")
CNN_NORMS = ("none", "batch", "layer")
CNN_GLOBAL_POOLS = ("none", "max", "avg")
CNN_ACTIVATIONS = ("elu", "selu", "relu", "crelu", "lrelu", "leakyrelu", "tanh", "sigmoid", "softplus", "gelu")
CNN_ACTIVATIONS += ("swish", "silu", "mish", "identity")
"""rsl_rl's activation names (``rsl_rl.utils.resolve_nn_activation``), which its CNN configs use."""
IMAGE_ENCODERS = ("cnn", "spatial_softmax")
TRACKERS = ("tensorboard", "wandb", "neptune", "mlflow")
TRACKER_CLIENTS = {"wandb": "wandb", "neptune": "neptune", "mlflow": "mlflow"}
"""The Python package each tracker needs (``pip install 'isaaclab-torchrl[<tracker>]'``)."""


@configclass
class TorchRLCNNCfg:
    """An image encoder's CNN (rsl_rl's ``RslRlCNNModelCfg.CNNCfg``, fields of the same names, meanings and defaults;
    :class:`isaaclab_torchrl.encoders.CNN`). A per-layer field takes one value for every layer or a list of one per
    layer."""

    output_channels: list[int] = MISSING
    """Output channels of each convolution."""
    kernel_size: int | list[int] = MISSING
    stride: int | list[int] = 1
    dilation: int | list[int] = 1
    padding: str = "none"
    """``"none"``, or a padding mode (``"zeros"``, ``"reflect"``, ``"replicate"``, ``"circular"``) with the padding
    computed from each layer's input size, as rsl_rl does."""
    norm: str | list[str] = "none"
    """``"none"``, ``"batch"`` or ``"layer"``, after each convolution."""
    activation: str = "elu"
    """rsl_rl's activation names (:data:`isaaclab_torchrl.encoders.CNN_ACTIVATIONS`)."""
    max_pool: bool | list[bool] = False
    """A ``MaxPool2d(3, 2, 1)`` after each layer's activation."""
    global_pool: str = "none"
    """``"none"``, ``"max"`` or ``"avg"`` over the last feature map."""
    flatten: bool = True
    """Must stay ``True`` (the MLP reads a flat input; rsl_rl's rule); ``encoder="spatial_softmax"`` reads the
    feature map itself."""


def cnn_configs(cnn_cfg, groups) -> dict[str, TorchRLCNNCfg]:
    """The CNN config of each image group in ``groups`` from an ``*_cnn_cfg`` field: one config (or its dict, as a
    checkpoint's YAML holds it) for every group, or a dict of one per group name.

    Raises:
        KeyError: a group without a config in a per-group dict.
    """

    def config(value) -> TorchRLCNNCfg:
        return value if isinstance(value, TorchRLCNNCfg) else TorchRLCNNCfg(**value)

    if isinstance(cnn_cfg, TorchRLCNNCfg) or "output_channels" in cnn_cfg:
        return {group: config(cnn_cfg) for group in groups}
    return {group: config(cnn_cfg[group]) for group in groups}


@configclass
class TorchRLActorCfg:
    """A Gaussian actor (rsl_rl's actor model config): the network a policy acts with. A distillation run's student
    and teacher are each one (:class:`TorchRLDistillationRunnerCfg`)."""

    rnn_type: str | None = None
    """Recurrent layer in front of the MLPs: ``"lstm"``, ``"gru"`` or ``None`` for a plain MLP policy."""
    rnn_hidden_size: int = 256
    rnn_num_layers: int = 1
    recurrent_backend: str = "auto"
    """How the recurrent layers run over whole trajectory slices (GAE and the update): ``"pad"`` (torchrl's: cuDNN
    over the slices split at episode starts, data-dependent shapes that a CUDA graph cannot replay) or ``"fused"``
    (:mod:`isaaclab_torchrl.recurrent`: a time loop of fixed length with the episode starts as a mask and its
    backward pass written out, which a CUDA graph replays). ``"auto"``: ``"fused"`` where the update is a CUDA
    graph, else ``"pad"``, the faster one eagerly (docs/benchmarks.md). Collection steps the layers one step at a
    time with cuDNN, whatever the backend; checkpoints move between backends."""
    actor_hidden_dims: list[int] = MISSING
    activation: str = "elu"
    """Name of a :mod:`torch.nn` activation, case-insensitive: one of :data:`ACTIVATIONS`."""
    init_noise_std: float = 1.0
    """Initial standard deviation of the Gaussian action noise."""
    std_range: list[float] = [1e-6, 1e6]
    """The ``[min, max]`` range the noise's standard deviation is clamped to (rsl_rl's ``std_range``; its floor is at
    least 1e-6). A list, so that the run folder's ``params/agent.yaml`` reads back with ``yaml.safe_load``."""
    learn_std: bool = True
    """Learn the noise's standard deviation; ``False`` keeps it at :attr:`init_noise_std` (rsl_rl's
    ``learn_std``)."""
    noise_std_type: str = "scalar"
    """Parameter of the action noise: ``"scalar"`` (learns std, rsl_rl's default) or ``"log"`` (learns log(std))."""
    state_dependent_std: bool = False
    """The actor's MLP outputs the noise's standard deviation (or its log, :attr:`noise_std_type`) beside the mean,
    so that the noise depends on the observation (rsl_rl's ``HeteroscedasticGaussianDistribution``): the std head
    starts with zero weights and a bias of :attr:`init_noise_std`, and its output is clamped to :attr:`std_range`.
    Needs :attr:`learn_std`. Deployed and exported policies output the mean only."""
    actor_obs_normalization: bool = False
    """Normalise the actor's input with running mean and variance (rsl_rl's ``obs_normalization``), updated by the
    learner from each batch, sent to the workers with the weights, saved in checkpoints and exported."""
    actor_cnn_cfg: TorchRLCNNCfg | dict[str, TorchRLCNNCfg] | None = None
    """The CNN of each image group the actor reads (rsl_rl's ``RslRlCNNModelCfg.cnn_cfg``): one config for every
    group, or a dict of one per group name. Image groups (``[C, H, W]`` per environment) go through it, their
    features after the flat groups' (normalised) input, before the recurrent layer / MLP. Needed when the actor reads
    an image group."""
    encoder: str = "cnn"
    """``"cnn"``: the CNN's flattened output (rsl_rl's ``CNNModel``); ``"spatial_softmax"``: the expected position of
    each channel of its last feature map (Isaac Lab's KukaAllegro camera tasks' ``SpatialSoftmaxCNNModel``, with its
    image scaling). uint8 images are scaled to ``[0, 1]`` by ``"cnn"``; float images are read as they are."""
    init_temperature: float = 1.0
    """The spatial softmax's initial temperature (``encoder="spatial_softmax"``)."""
    actor_class_name: str | None = None
    """A network class of your own in place of the actor's MLP, as ``"module:Class"`` (rsl_rl's model
    ``class_name``): built as ``Class(in_features, out_features, cfg)`` with this config (a subclass of it may carry
    the class's own fields), it maps ``[..., in_features]`` (the normalised observations, the image features, or the
    recurrent layer's output) to ``[..., out_features]`` (the action mean). Normalisation, image encoders, the
    recurrent layer, the noise, checkpoints, play and export stay the runner's; export needs a TorchScript-able
    class. ``None``: an MLP of :attr:`actor_hidden_dims`."""


@configclass
class TorchRLPolicyCfg(TorchRLActorCfg):
    """Actor and critic networks (the critic has the actor's activation and recurrent layer)."""

    critic_hidden_dims: list[int] = MISSING
    critic_obs_normalization: bool = False
    """Normalise the critic's input, as :attr:`actor_obs_normalization` the actor's."""
    critic_cnn_cfg: TorchRLCNNCfg | dict[str, TorchRLCNNCfg] | None = None
    """The critic's CNNs, as :attr:`actor_cnn_cfg` the actor's (the critic's encoder is always ``"cnn"``)."""
    critic_class_name: str | None = None
    """The value network's class of your own, as :attr:`actor_class_name` the actor's (``out_features`` is 1)."""
    share_cnn_encoders: bool = False
    """The critic reads its image groups through the actor's CNNs (rsl_rl's ``share_cnn_encoders``, an algorithm
    field there): one copy of their weights, trained by both losses; the groups must be the actor's."""


@configclass
class TorchRLSymmetryCfg:
    """Symmetry augmentation (rsl_rl's ``RslRlSymmetryCfg``, fields of the same names and meanings): the task's
    function that mirrors observations and actions, applied to every minibatch of an MLP policy's update.

    The function is read once per task, in the process that probes the environment, as a column selection with
    signs per mirrored copy (:mod:`isaaclab_torchrl.symmetry`); a function that is not one is refused there."""

    use_data_augmentation: bool = False
    """Append the mirrored samples to every minibatch: the surrogate and value losses average over all copies; the
    entropy and the KL of the adaptive learning rate over the original samples only, as in rsl_rl."""
    use_mirror_loss: bool = False
    """Add :attr:`mirror_loss_coeff` times the mean squared difference between the actor's mean on mirrored
    observations and the mirrored mean on the original ones. With neither option the mirror loss is only logged
    (``Loss/symmetry``), as in rsl_rl."""
    data_augmentation_func: object = MISSING
    """The task's ``f(env, obs, actions) -> (obs, actions)`` (Isaac Lab's signature), or its ``"module:name"``."""
    mirror_loss_coeff: float = 0.0


RND_WEIGHT_SCHEDULES = ("constant", "step", "linear")


@configclass
class TorchRLRndWeightScheduleCfg:
    """How the intrinsic reward's weight changes with the env steps (rsl_rl's weight schedules): ``"constant"``;
    ``"step"``: :attr:`TorchRLRndCfg.weight` until ``final_step``, then ``final_value``; ``"linear"``: from the
    weight at ``initial_step`` to ``final_value`` at ``final_step``. Steps count the env steps of one environment
    (an iteration adds ``num_steps_per_env``)."""

    mode: str = "constant"
    final_value: float | None = None
    initial_step: int | None = None
    final_step: int | None = None


@configclass
class TorchRLRndCfg:
    """Random network distillation (rsl_rl's ``RslRlRndCfg``, fields of the same names and meanings): an intrinsic
    reward, the error of a trained predictor network against a fixed random target network on the ``rnd_state``
    observation groups (``agent.obs_groups``; default: the task's ``rnd_state`` group, else ``policy``)."""

    weight: float = 0.0
    """The intrinsic reward's weight, multiplied by the task's step duration (rsl_rl's rule; a schedule's
    ``final_value`` is not)."""
    weight_schedule: TorchRLRndWeightScheduleCfg | None = None
    reward_normalization: bool = False
    """Divide the intrinsic reward by the running std of its discounted sum (rsl_rl's reward normalisation)."""
    state_normalization: bool = False
    """Normalise the networks' input with running mean and variance."""
    learning_rate: float = 1e-3
    num_outputs: int = 1
    """Size of the embedding the predictor and the target output."""
    predictor_hidden_dims: list[int] = [-1]
    """Hidden layers of the predictor; ``-1``: the input's size."""
    target_hidden_dims: list[int] = [-1]


@configclass
class TorchRLPpoCfg:
    """PPO with clipped objective, adaptive-KL learning rate and GAE."""

    num_learning_epochs: int = MISSING
    num_mini_batches: int = MISSING
    """Minibatches per epoch; each holds whole per-environment trajectory slices of ``num_steps_per_env`` steps."""
    clip_param: float = 0.2
    use_clipped_value_loss: bool = True
    entropy_coef: float = 0.01
    value_loss_coef: float = 1.0
    learning_rate: float = MISSING
    schedule: str = "adaptive"
    """``"adaptive"`` (rsl_rl's KL-driven learning rate) or ``"fixed"``."""
    desired_kl: float | None = 0.01
    """The KL the adaptive schedule aims at; ``None``: the learning rate is not adapted (rsl_rl's rule)."""
    max_grad_norm: float = 1.0
    gamma: float = 0.99
    lam: float = 0.95
    normalize_advantage: bool = True
    """Standardise advantages over the whole batch (rsl_rl's default)."""
    use_mixed_precision: bool = False
    """Compute the losses (the networks' forward passes) under bfloat16 autocast, as rsl_rl's option of the same
    name; the parameters, the optimizer and the gradients stay float32."""
    symmetry_cfg: TorchRLSymmetryCfg | None = None
    """Symmetry augmentation and mirror loss (MLP policies only, as in rsl_rl); ``None``: off."""
    rnd_cfg: TorchRLRndCfg | None = None
    """Random network distillation's intrinsic reward; ``None``: off."""


@configclass
class TorchRLCollectorCfg:
    """Subprocess data collection with torchrl's multi-process collectors."""

    num_collectors: int = 1
    """Collector subprocesses; each owns one Isaac Lab simulation with ``num_envs / num_collectors`` envs."""
    sync: bool | None = None
    """``True``: :class:`MultiSyncCollector` (on-policy). ``False``: :class:`MultiAsyncCollector`, the workers
    collect the next rollout while the learner updates (lag-corrected PPO). ``None``: asynchronous with
    ``speed="auto"`` (faster on the GPU and on a 2-core CPU, learning as well: ``docs/benchmarks.md``),
    synchronous with ``speed="off"``. A fixed seed repeats a run exactly only with synchronous collection, on one
    kind of CPU (``docs/architecture.md``)."""
    storing_device: str | None = None
    """Device the batches are stored on; ``None``: the simulation device. On a GPU, the collection's hand-over rules
    (see :mod:`isaaclab_torchrl.runners.collection`) keep them intact, which ``benchmarks/storage_proof.py`` checks
    with a checksum of every batch in the worker and in the learner (``docs/benchmarks.md``). ``cpu`` sends them
    through host memory (a device-to-host copy per step)."""
    cudagraph_policy: bool | None = None
    """Run the workers' policy inference as a CUDA graph (torchrl's ``cudagraph_policy``): one replay per
    step instead of a kernel launch per operator. Needs a CUDA simulation device. ``None``: on one (see
    :attr:`TorchRLRunnerCfg.speed`)."""
    first_batch_timeout_s: float = 900.0
    """Seconds to wait for the first batch (the workers start their simulations first; on a fresh GPU machine
    that includes compiling the simulator's kernels) before stopping with a timeout error."""
    batch_timeout_s: float = 120.0
    """Seconds to wait for any later batch, or for the workers' acknowledgement of new weights, before stopping with
    a timeout error (a hung worker)."""
    shutdown_timeout_s: float = 10.0
    """Seconds the workers get to shut down cleanly, when training ends or fails, before they are killed."""


@configclass
class TorchRLRunnerCfg:
    """Top-level runner configuration."""

    seed: int = 42
    device: str = "cuda:0"
    """Device of the simulation and of the collection-time policy (overridden by ``--device``)."""
    train_device: str | None = None
    """Device of the learner; ``None`` uses :attr:`device`."""
    speed: str = "auto"
    """``"auto"``: the settings left at ``None`` (:attr:`compile`, :attr:`cudagraphs`, ``collector.sync`` and
    ``collector.cudagraph_policy``) take the fast values where they apply: a compiled update replayed as a CUDA
    graph on a CUDA learner, graphed inference on a CUDA simulation, asynchronous collection on every device; the
    plain ones elsewhere. ``"off"``: the plain ones everywhere (synchronous collection). ``scripts/train.py``
    prints what was chosen."""
    compile: bool | None = None
    """Compile PPO's loss and backward pass with ``torch.compile`` (one graph each); the compilation runs in the first
    iteration and counts in its time. With :attr:`cudagraphs` the update is several times faster than eager
    (``docs/benchmarks.md``). ``None``: see :attr:`speed`."""
    cudagraphs: bool | None = None
    """Replay the PPO gradient step (loss and backward) as a CUDA graph (tensordict's ``CudaGraphModule``): the
    first two minibatches run eagerly and the third is captured, within the training loop. Needs a CUDA learner,
    :attr:`compile`, and an MLP policy or a ``policy.recurrent_backend`` other than ``pad`` (which splits
    trajectories with data-dependent shapes, which a graph cannot replay). ``None``: see :attr:`speed`."""
    tf32: bool = True
    """Let the learner's float32 matrix products (the update and GAE, on a CUDA learner) use TF32, as rsl_rl's do when
    Isaac Lab trains it (its launcher allows TF32 in CUDA's products and cuDNN's) and as the workers' cuDNN inference
    does by default; ``false``: float32. The measurement behind the default: ``docs/benchmarks.md``."""
    num_steps_per_env: int = MISSING
    max_iterations: int = MISSING
    save_interval: int = 50
    eval_interval: int | None = None
    """Evaluate the deterministic policy every this many iterations on an evaluation worker of its own (logged as
    ``Eval/*``; the best evaluated policy is kept as ``model_best.pt``); ``0`` or ``None``: never (the default: on one
    GPU the worker's simulation takes turns with the collector's). See ``docs/logging.md``."""
    eval_episodes: int = 10
    """Episodes of each evaluation: as many environments, each counted to the end of its first episode."""
    experiment_name: str = MISSING
    run_name: str = ""
    logger: str = "tensorboard"
    """Where the scalars go besides the run folder's TensorBoard events (always written): ``tensorboard`` (nothing
    else), ``wandb``, ``neptune`` or ``mlflow`` (``--logger``); a tracker also receives the configs, the git state
    and the checkpoints."""
    wandb_project: str = "isaaclab"
    """The W&B project (``--log_project_name``)."""
    neptune_project: str = "isaaclab"
    """The Neptune project (``--log_project_name``)."""
    mlflow_experiment: str | None = None
    """The MLflow experiment (``--log_project_name``); ``None``: :attr:`experiment_name`. The store is
    ``MLFLOW_TRACKING_URI``'s."""
    obs_groups: dict[str, list[str]] | None = None
    """Observation groups of the task that the ``"actor"`` and the ``"critic"`` read, concatenated in this order
    (rsl_rl's ``obs_groups``). ``None`` or a missing entry: the actor reads ``policy``; the critic reads
    ``critic`` when the task defines it (asymmetric actor-critic), else what the actor reads."""
    clip_actions: float | None = None
    """Clipping range of the actions sent to the environment; ``None`` disables it."""
    check_for_nan: bool = True
    """Stop on NaN/Inf in observations, rewards, advantages, losses or gradients (rsl_rl's option of the same
    name). From a minibatch whose losses or gradient are not finite on, the steps are skipped on the learner's device,
    which is read once per update."""
    init_at_random_ep_len: bool = True
    """Start the first episodes at random points of their time limit (rsl_rl's option of the same name), so
    that episodes do not all time out in the same step."""
    policy: TorchRLPolicyCfg = MISSING
    algorithm: TorchRLPpoCfg = MISSING
    collector: TorchRLCollectorCfg = TorchRLCollectorCfg()


@configclass
class TorchRLDistillationCfg:
    """Student-teacher distillation (rsl_rl's ``RslRlDistillationAlgorithmCfg``, fields of the same names, meanings
    and defaults): the student's mean action learns the teacher's, over the steps the student took."""

    num_learning_epochs: int = MISSING
    """Passes over each batch."""
    learning_rate: float = MISSING
    gradient_length: int = MISSING
    """Env steps whose losses are summed before each optimizer step; a recurrent student's gradient flows back
    through as many steps (truncated backpropagation through time). The steps of all epochs follow one another, as
    in rsl_rl; those left over after the last full group are not learned from."""
    max_grad_norm: float | None = None
    """Clip the student's gradient norm to this; ``None``: no clipping."""
    optimizer: str = "adam"
    """One of :data:`OPTIMIZERS`."""
    loss_type: str = "mse"
    """``"mse"`` or ``"huber"`` (``torch.nn.functional``'s, delta 1), between the student's mean action and the
    teacher's."""


@configclass
class TorchRLDistillationRunnerCfg(TorchRLRunnerCfg):
    """A distillation run (rsl_rl's ``RslRlDistillationRunnerCfg``): the student acts in the environments, with its
    Gaussian noise, and learns the deterministic action of a fixed teacher, loaded from a checkpoint
    (``--checkpoint``), that acts beside it in the collector workers on its own observation groups.

    The speed settings of PPO's update (``compile``, ``cudagraphs``) do not apply: the update runs eagerly."""

    policy: TorchRLActorCfg = MISSING
    """The student: the network that is trained, played and exported."""
    teacher: TorchRLActorCfg = MISSING
    """The teacher's network, as the checkpoint it is loaded from has it."""
    algorithm: TorchRLDistillationCfg = MISSING
    obs_groups: dict[str, list[str]] | None = None
    """Observation groups of the task that the ``"student"`` and the ``"teacher"`` read, concatenated in this order
    (rsl_rl's ``obs_groups``). ``None`` or a missing entry: the task's group of that name, else ``policy``."""
