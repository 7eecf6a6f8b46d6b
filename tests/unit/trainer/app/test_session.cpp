// What a training process sets up from the options: the model on its
// device, its data, and the PS optimizer.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE session
#include <boost/test/unit_test.hpp>

#include "trainer/app/session.hpp"

using namespace pstrain::trainer;

BOOST_AUTO_TEST_CASE(the_linear_model_gets_its_synthetic_data_and_two_parameters)
{
    train_options o;
    o.model = "linear";
    o.family = model_family::linear;
    o.device = pstrain::compute::device_kind::cpu;
    o.threads = 1;
    const auto s = open_session(o);
    BOOST_TEST_REQUIRE(static_cast<bool>(s.net));
    BOOST_TEST(!s.ctr);
    BOOST_TEST(s.shape().describe() == "linear");
    BOOST_TEST(s.shape().num_params() == 2u);
    BOOST_TEST(s.data.train.rows == 1000u);
    BOOST_TEST(s.data.test.rows == 200u);
    BOOST_TEST(!s.net->is_classifier());
    BOOST_TEST(s.backend->host_memory());
}

BOOST_AUTO_TEST_CASE(the_ps_optimizer_is_the_one_the_options_name_at_their_learning_rate)
{
    train_options o;
    o.optimizer = pstrain::ps::optimizer_kind::momentum;
    o.learning_rate = 0.25f;
    const auto c = optimizer_from(o);
    BOOST_TEST((c.kind == pstrain::ps::optimizer_kind::momentum));
    BOOST_TEST(c.learning_rate == 0.25f);
}
